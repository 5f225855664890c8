"""caisson: run a command in a sealed chamber, witness it, keep the evidence."""

__all__ = ["__version__"]

__version__ = "0.1.0"
