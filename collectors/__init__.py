"""Witnesses: one module per witness, each a sans-IO parser plus a thin trio task."""

__all__: list[str] = []
