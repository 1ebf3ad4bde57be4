"""The `coevo` command's own text: what a newcomer reads first."""

from __future__ import annotations

import typer.main
from typer.testing import CliRunner

from coevo.cli import app


def test_every_command_is_listed_on_one_line_that_ends_a_sentence():
    def listed(group, prefix=""):
        for name, command in group.commands.items():
            yield prefix + name, command.get_short_help_str(limit=200)
            yield from listed(command, f"{prefix}{name} ") if hasattr(command, "commands") else ()

    for name, text in listed(typer.main.get_command(app)):
        assert "\n" not in text and len(text) <= 90, (name, text)
        assert text.endswith("."), (name, text)
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    assert "from the\n" not in result.output
