"""User-facing errors.

Every error a user can cause (bad config key, malformed data line, missing path, offline hub)
is raised as :class:`SatseqError` with a one-line message naming the file and line or the config
key. The CLI catches it, prints ``error: <message>`` and exits with status 2 — never a traceback.
"""
from __future__ import annotations


class SatseqError(Exception):
    """A problem with the user's input, reported as one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class ConfigError(SatseqError):
    """An unknown, missing or ill-typed configuration key."""


class DataError(SatseqError):
    """A dataset that cannot be read: malformed line, missing field, empty file."""


class OfflineError(SatseqError):
    """Something needs a hub (model or dataset) and no network is available."""
