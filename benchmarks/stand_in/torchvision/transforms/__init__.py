"""Stand-in: see the package docstring."""
