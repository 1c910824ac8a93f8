"""`docsearch models list | pull | calibrate`: the encoders, their models, offline weights.

Not here: the encoder registry (`docsearch.encoders.base`), weights (`docsearch.encoders.weights`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from docsearch.app.common import JsonOption, handle_errors

models_app = typer.Typer(help="Encoders and the models they can use.", no_args_is_help=True)


@models_app.command("list")
@handle_errors
def models_list(as_json: JsonOption = False) -> None:
    """Encoders you can pass to --encoder, and models that ship in Python packages."""
    from docsearch.encoders.base import available
    from docsearch.encoders.precision import NOT_CHOSEN, describe_choices
    from docsearch.encoders.weights import list_models

    models = [{**m.__dict__, "path": str(m.path) if m.path else None} for m in list_models()]
    inference = describe_choices()  # what precision=auto measured and runs on this machine
    if as_json:
        found = {"encoders": available(), "models": models, "inference": inference}
        typer.echo(json.dumps(found, indent=2))
        return
    typer.echo("encoders: " + ", ".join(available()))
    for m in models:
        if not m["package"]:
            state = "Hub"
        elif m["cached"]:
            state = "ready"
        else:
            state = "installed" if m["installed"] else f"pip install {m['package']}"
        typer.echo(f"{m['name']}\t{m['hub_id']}\t{m['licence']}\t{state}\t{m['note']}".rstrip())
    for line in inference:
        typer.echo(f"inference on this machine: {line}")
    if not inference:
        typer.echo(f"inference on this machine: {NOT_CHOSEN}")


@models_app.command("pull")
@handle_errors
def models_pull(
    name: Annotated[
        str, typer.Argument(help="Packaged model (smollm2-135m, gemma3-270m...) or Hub id.")
    ],
    force: Annotated[bool, typer.Option("--force", help="Convert or download again.")] = False,
) -> None:
    """Make a model available offline: convert a packaged GGUF once, or download a Hub model."""
    from docsearch.encoders.weights import pull

    typer.echo(str(pull(name, force=force)))


@models_app.command("calibrate")
@handle_errors
def models_calibrate(
    model: Annotated[str, typer.Argument(help="Decoder model for kv-embedding.")] = "smollm2-135m",
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Recompute, ignore the cache.")
    ] = False,
) -> None:
    """Choose KV-Embedding's re-routing layers by intrinsic dimension (cached next to the weights)."""
    from docsearch.encoders.kv_embedding import calibrate_layers

    result = calibrate_layers(model, refresh=refresh)
    typer.echo(json.dumps(result, indent=2, default=str))
