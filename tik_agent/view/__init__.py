"""What a person sees of a run: the live view and the report."""
