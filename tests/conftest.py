"""Shared test set-up: offline Hugging Face, a throwaway database, the hashing fake encoder."""

from __future__ import annotations

import os
from pathlib import Path

# Any accidental Hub call must fail fast instead of hanging on the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

import tests.fakes  # noqa: E402,F401  (registers the `hashing` encoder)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _isolated_paths(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test gets its own database and config dirs; nothing touches the user's."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("DOCSEARCH_DB", str(home / "db"))
    monkeypatch.setenv("DOCSEARCH_HOME", str(home / "data"))
    monkeypatch.setenv("DOCSEARCH_PLUGINS", "tests.fakes")
