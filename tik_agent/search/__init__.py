"""The optimisation loop and its rules."""
