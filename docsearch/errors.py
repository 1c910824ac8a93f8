"""Domain errors: every failure a user can cause or fix is one of these.

The CLI turns them into one line on stderr and an exit code; the UI into a visible message.
Library code never prints.
"""

from __future__ import annotations

from collections.abc import Sequence


class DocsearchError(Exception):
    """Base class. The message is a full sentence that says what to do."""

    exit_code = 1


class UsageError(DocsearchError):
    """The user asked for something that cannot work as asked (bad option, missing path)."""

    exit_code = 2


class UnknownEncoderError(UsageError, KeyError):
    """No encoder is registered under this name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EncoderUnavailableError(DocsearchError):
    """The encoder exists but cannot run here (weights missing offline, a CUDA-only option on CPU)."""


class EncoderMismatchError(DocsearchError):
    """A collection was built with one encoder and is being opened with another."""


class CollectionNotFoundError(UsageError):
    """No collection of that name in the database."""


class ExtractionError(DocsearchError):
    """A file could not be turned into text; the message is the reason recorded for it.

    `warnings`: what the parsers complained about meanwhile (reported beside the reason).
    """

    def __init__(self, message: str, warnings: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.warnings = list(warnings)


class DataFormatError(UsageError):
    """Input data (JSONL, BEIR folder, qrels) is malformed; the message names file and line."""
