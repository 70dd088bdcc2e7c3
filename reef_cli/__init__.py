"""reef: a Git-backed, gated learning loop over coding-agent harnesses."""

__version__ = "0.1.0"
