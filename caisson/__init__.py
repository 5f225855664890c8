"""caisson: run a command in a sealed chamber, witness it, keep the evidence."""

__version__ = "0.1.0"
