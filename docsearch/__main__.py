"""`python -m docsearch ARGS`: the same program as the `docsearch` command."""

from __future__ import annotations

from docsearch.app.cli import app

if __name__ == "__main__":
    # The name in usage lines and errors, which click would otherwise spell `python -m docsearch`.
    app(prog_name="docsearch")
