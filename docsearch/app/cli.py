"""The `docsearch` command line: the typer app, assembled from one module per command.

Results go to stdout, progress and logs to stderr. Exit codes: 0 ok, 1 error, 2 usage,
3 finished but some files failed. Heavy libraries are imported inside the commands so that
`docsearch --help` stays instant. `main` is the console script; `python -m docsearch` runs `app`.
Not here: the commands (`*_cmd.py`), what they share (`common.py`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated, Any

import typer

from docsearch.app.collections_cmd import collections_app
from docsearch.app.doctor_cmd import doctor
from docsearch.app.eval_cmd import eval_command
from docsearch.app.finetune_cmd import finetune_command
from docsearch.app.index_cmd import index
from docsearch.app.keys_cmd import keys_app
from docsearch.app.models_cmd import models_app
from docsearch.app.search_cmd import search
from docsearch.app.serve_cmd import serve_command
from docsearch.app.similar_cmd import similar
from docsearch.app.ui_cmd import ui_command
from docsearch.app.watch_cmd import watch_command

app = typer.Typer(
    name="docsearch",
    help="Search long legal, medical and technical documents: index a folder, then search it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# `--help` lists commands in this order, then the groups.
app.command("index")(index)
app.command("search")(search)
app.command("similar")(similar)
app.command("doctor")(doctor)
app.command("eval")(eval_command)
app.command("finetune")(finetune_command)
app.command("ui")(ui_command)
app.command("serve")(serve_command)
app.command("watch")(watch_command)
app.add_typer(collections_app, name="collections")
app.add_typer(models_app, name="models")
app.add_typer(keys_app, name="keys")


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log what happens.")] = False,
) -> None:
    # Every command logs to stderr; the model libraries' own progress bars stay quiet.
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    _show_notices()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _show_notices() -> None:
    """The "docsearch.notice" logger (long one-off work a user waits for, such as timing the
    precisions) prints its INFO lines as they are, with or without --verbose."""
    notices = logging.getLogger("docsearch.notice")
    if not any(isinstance(h, _StderrNow) for h in notices.handlers):
        handler = _StderrNow()
        handler.setFormatter(logging.Formatter("%(message)s"))
        notices.addHandler(handler)
    notices.setLevel(logging.INFO)
    notices.propagate = False


class _StderrNow(logging.StreamHandler):
    """Writes to sys.stderr as it is when a line is written (a progress bar swaps it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
