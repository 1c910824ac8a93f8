"""Shared test set-up: offline Hugging Face, a throwaway database, the hashing fake encoder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

# Any accidental Hub call must fail fast instead of hanging on the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

import tests.fakes  # noqa: E402,F401  (registers the `hashing` encoder)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True, scope="session")
def _isolated_session_paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Session- and module-scoped fixtures are set up before a test's own paths below: they get
    the session's, so no fixture writes the user's cache (calibrations, model exports)."""
    with pytest.MonkeyPatch.context() as patch:
        home = tmp_path_factory.mktemp("session-home")
        patch.setenv("DOCSEARCH_DB", str(home / "db"))
        patch.setenv("DOCSEARCH_HOME", str(home / "data"))
        yield


@pytest.fixture(autouse=True)
def _isolated_paths(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test gets its own database and config dirs; nothing touches the user's."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("DOCSEARCH_DB", str(home / "db"))
    monkeypatch.setenv("DOCSEARCH_HOME", str(home / "data"))
    monkeypatch.setenv("DOCSEARCH_PLUGINS", "tests.fakes")


def _torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to `count` for one test, then put back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is faster than two on a shared 2-core machine."""
    yield from _torch_threads(1)


@pytest.fixture
def two_torch_threads() -> Iterator[None]:
    """Two threads whatever the machine has: what the CPU encode workers split."""
    yield from _torch_threads(2)


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random sentence-transformers folder (tests/training/tiny_st.py), once per module."""
    from tests.training.tiny_st import build_tiny_st

    return build_tiny_st(tmp_path_factory.mktemp("models") / "tiny-st")
