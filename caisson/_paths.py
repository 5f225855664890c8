"""Where things are inside the chamber (one definition for the recorder, witnesses, detectors)."""

__all__ = ["CONFIG_HOME", "SANDBOX_PATH"]

SANDBOX_PATH = "/work/sandbox"
"""Where the sandbox tree is mounted in the chamber; cwd and PWD point here."""
CONFIG_HOME = "/tmp/caisson-home"
"""The agent's fresh config home inside the chamber (created empty for every run)."""
