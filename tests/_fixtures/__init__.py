"""Builders only tests and benchmarks use: synthetic event streams and signed synthetic cells."""
