"""The run directory: git lineage, journal, settings, resume."""
