"""Fixtures for the UI tests: the small corpus of `corpus.py`, indexed once per module."""

from __future__ import annotations

import pytest

from tests.ui.corpus import Corpus, build_corpus, index_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    built = build_corpus(tmp_path_factory.mktemp("ui"))
    index_corpus(built)
    return built
