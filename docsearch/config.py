"""Settings and paths.

Precedence: command-line option > `DOCSEARCH_*` environment > `./docsearch.toml` > the user's
`config.toml` (platformdirs config dir) > defaults. Data lives in the platformdirs user data dir
unless `DOCSEARCH_DB` (a folder or an object-store URI LanceDB understands) or `DOCSEARCH_HOME`
says otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from docsearch.defaults import (
    DEFAULT_ENCODER,
    DEFAULT_EXTRACT_MEMORY_MB,
    DEFAULT_EXTRACT_SECONDS,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MAX_TEXT_MB,
    DEFAULT_TOKEN_BUDGET,
    GROUP_CHUNKS,
)
from docsearch.fusion import CHUNK_FUSION, Fusion

APP = "docsearch"


def data_home() -> Path:
    """Where docsearch keeps its data: $DOCSEARCH_HOME or the platform's user data dir."""
    if home := os.environ.get("DOCSEARCH_HOME"):
        return Path(home).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP))


def cache_home() -> Path:
    """Converted model weights and calibration caches: $DOCSEARCH_CACHE or the user cache dir."""
    if cache := os.environ.get("DOCSEARCH_CACHE"):
        return Path(cache).expanduser()
    if home := os.environ.get("DOCSEARCH_HOME"):
        return Path(home).expanduser() / "cache"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(APP))


def user_config_file() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP)) / "config.toml"


def _default_db() -> str:
    return str(data_home() / "lancedb")


class Settings(BaseSettings):
    """Everything configurable; each field is also `DOCSEARCH_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="DOCSEARCH_", extra="ignore")

    db: str = Field(default_factory=_default_db, description="database folder or URI")
    encoder: str = Field(DEFAULT_ENCODER, description="default encoder for new collections")
    model: str | None = Field(None, description="default model for the encoder")
    max_tokens: int | None = Field(None, description="cap on chunk size in tokens")
    overlap: int = Field(0, description="tokens repeated between neighbouring chunks")
    token_budget: int = Field(DEFAULT_TOKEN_BUDGET, description="padded tokens per encoder batch")
    commit_chunks: int = Field(GROUP_CHUNKS, description="chunks written per commit while indexing")
    # Per-file limits (docsearch.indexer.extract.Limits): a file over one is refused with a reason.
    max_file_mb: float = Field(
        DEFAULT_MAX_FILE_MB, gt=0, description="largest file read, and largest DOCX unpacked, in MB"
    )
    max_text_mb: float = Field(
        DEFAULT_MAX_TEXT_MB,
        gt=0,
        description="most text indexed from one file, in millions of characters "
        "(for .txt, .md and .html files: the file size in MB)",
    )
    extract_seconds: float = Field(
        DEFAULT_EXTRACT_SECONDS,
        ge=0,
        description="time allowed to extract one file (0: no limit, extract in this process)",
    )
    extract_memory_mb: float = Field(
        DEFAULT_EXTRACT_MEMORY_MB,
        ge=0,
        description="memory (address space) the extraction process may use, in MB (0: no cap)",
    )
    ocr_engine: Literal["auto", "tesseract", "rapidocr", "none"] = Field(
        "auto", description="OCR engine for scanned pages and images (auto: the best installed)"
    )
    ocr_cache: str = Field(
        default_factory=lambda: str(data_home() / "ocr-cache"),
        description="folder of OCR'd page texts ('': no cache)",
    )
    ocr_lang: str = Field(
        "eng", pattern=r"^[a-z_]+(\+[a-z_]+)*$", description="OCR language(s), e.g. eng or deu+eng"
    )
    # Left unset, hybrid search ranks documents by the document-level rule and passages by
    # CHUNK_FUSION (docsearch.fusion). Setting any of these fuses the two chunk legs (dense,
    # lexical) with this method and these weights instead, a document scoring as its best chunk
    # in each, as before the document level existed (benchmarks/results/fusion.md).
    fusion_method: str | None = Field(
        None, description="hybrid fusion of the chunk legs: maxnorm, minmax, zscore or rrf"
    )
    dense_weight: float | None = Field(None, description="weight of the dense chunk leg")
    lexical_weight: float | None = Field(None, description="weight of the lexical chunk leg")
    rrf_k: int = Field(CHUNK_FUSION.k, description="RRF constant k (rrf only)")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        files = [p for p in (Path("docsearch.toml"), user_config_file()) if p.is_file()]
        tomls = [TomlConfigSettingsSource(settings_cls, toml_file=p) for p in files]
        return (init_settings, env_settings, *tomls)

    @classmethod
    def resolve(cls, **given: Any) -> Self:
        """The settings of one command: the options it was given (None: not given) over the
        environment, the config files and the defaults."""
        return cls(**{name: value for name, value in given.items() if value is not None})

    def with_default_model(self, encoder: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
        """`options`, plus the configured model when the encoder is left to the default one."""
        merged = dict(options)
        if encoder is None and self.model:
            merged.setdefault("model", self.model)
        return merged

    def fusion(self) -> Fusion | None:
        """The chunk-leg fusion the settings ask for; None (the default rules) if none is set."""
        given = (self.fusion_method, self.dense_weight, self.lexical_weight)
        if given == (None, None, None):
            return None
        default = CHUNK_FUSION.weights
        weights = {
            "dense": default["dense"] if self.dense_weight is None else self.dense_weight,
            "lexical": default["lexical"] if self.lexical_weight is None else self.lexical_weight,
        }
        return Fusion(self.fusion_method or CHUNK_FUSION.method, weights, self.rrf_k)
