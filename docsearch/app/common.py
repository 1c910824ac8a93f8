"""What the commands share: the options several of them take, encoder options, error handling.

An option declared here has one spelling, help text and environment variable in every command
that takes it. `handle_errors` wraps each command: a `DocsearchError` becomes one line on stderr
and its exit code (1 error, 2 usage, 3 some files failed), Ctrl-C exit 130, never a traceback.
Imports only typer and `docsearch.errors`, so that `docsearch --help` stays instant.
Not here: the commands (`*_cmd.py`), the typer app that assembles them (`cli.py`), settings
(`docsearch.config`; each command resolves them once, with `Settings.resolve`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from docsearch.errors import DocsearchError, UsageError

F = TypeVar("F", bound=Callable[..., Any])

DbOption = Annotated[
    str | None,
    typer.Option("--db", envvar="DOCSEARCH_DB", help="Database folder or URI.", show_default=False),
]
CollectionOption = Annotated[
    str | None,
    typer.Option("--collection", "-c", help="Collection name (default: see `search --help`)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="JSON output.")]
ModelOption = Annotated[str | None, typer.Option("--model", "-m", help="Model id or folder.")]
NewEncoderOption = Annotated[
    str | None,
    typer.Option("--encoder", "-e", help="Encoder for a new collection ('none': BM25 only)."),
]
EncoderOptionsOption = Annotated[
    list[str] | None, typer.Option("--option", "-o", help="Encoder option KEY=VALUE.")
]
MaxTokensOption = Annotated[
    int | None,
    typer.Option("--max-tokens", help="Cap on chunk size in tokens (default: the encoder's)."),
]


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def handle_errors(command: F) -> F:
    """Domain errors become one line on stderr and their exit code; never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except DocsearchError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted; run the command again to finish", 130) from None

    return wrapper  # type: ignore[return-value]


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """['pooling=mean', 'bias=1.5'] -> {'pooling': 'mean', 'bias': 1.5} (JSON values allowed)."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"bad --option {pair!r}: use KEY=VALUE")
        try:
            options[key.replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            options[key.replace("-", "_")] = value
    return options


def encoder_options(
    pairs: list[str] | None, *, model: str | None = None, adapter: str | None = None
) -> dict[str, Any]:
    """The encoder's options from `--option KEY=VALUE`, with `--model` and `--adapter` on top."""
    options = parse_options(pairs)
    options.update({k: v for k, v in (("model", model), ("adapter", adapter)) if v})
    return options
