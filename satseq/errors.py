"""User-facing errors.

Every error a user can cause (bad config key, malformed data line, missing path, offline hub)
is raised as :class:`SatseqError` with a one-line message naming the file and line or the config
key. The CLI catches it, prints ``error: <message>`` and exits with status 2 — never a traceback.
"""
from __future__ import annotations


class SatseqError(Exception):
    """A problem with the user's input, reported as one line."""

    #: Longest message kept; the head names the file and line or the key, the rest is cut.
    MAX_LENGTH = 1000

    def __init__(self, message: str):
        text = str(message)
        if len(text) > 4 * self.MAX_LENGTH:
            text = text[: 4 * self.MAX_LENGTH]
        text = " ".join(text.split())
        if len(text) > self.MAX_LENGTH:
            text = text[: self.MAX_LENGTH - 3] + "..."
        super().__init__(text)


class ConfigError(SatseqError):
    """An unknown, missing or ill-typed configuration key."""


class DataError(SatseqError):
    """A dataset that cannot be read: malformed line, missing field, empty file."""


class OfflineError(SatseqError):
    """Something needs a hub (model or dataset) and no network is available."""
