"""Analyses of runs: outcome shares (Table 2), method comparison (Table 3)."""
