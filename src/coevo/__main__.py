"""`python -m coevo`: the `coevo` command, for launchers that start modules
(`accelerate launch -m coevo run RECIPE --out DIR`)."""

from coevo.cli import main

main()
