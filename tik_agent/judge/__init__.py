"""Judging a candidate: the evaluation call, bits, invariance, integrity, timing, verdicts."""
