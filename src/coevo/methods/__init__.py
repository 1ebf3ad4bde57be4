"""The methods as loops that read top to bottom, and `execute`, which runs one recipe."""
