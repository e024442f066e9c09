"""The command-line interface: argument parsing and output only; the work is done elsewhere."""
