"""One module per CLI command; each has ``register(subparsers)`` and sets ``func``."""

__all__: list[str] = []
