"""Settings resolved at the command line: given options over the environment over defaults."""

from __future__ import annotations

import pytest

from docsearch.config import Settings
from docsearch.defaults import DEFAULT_ENCODER, DEFAULT_TOKEN_BUDGET


def test_given_options_win_and_options_not_given_leave_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCSEARCH_DB", "/from/env")
    monkeypatch.setenv("DOCSEARCH_MAX_TOKENS", "128")
    assert Settings.resolve(db=None, max_tokens=None).db == "/from/env"
    given = Settings.resolve(db="/given", max_tokens=64, overlap=None)
    assert (given.db, given.max_tokens, given.overlap) == ("/given", 64, 0)
    assert (given.encoder, given.token_budget) == (DEFAULT_ENCODER, DEFAULT_TOKEN_BUDGET)


def test_the_configured_model_goes_only_to_the_default_encoder() -> None:
    settings = Settings(model="configured")
    assert settings.with_default_model(None, {"pooling": "mean"}) == {
        "pooling": "mean",
        "model": "configured",
    }
    assert settings.with_default_model("llm2vec", {}) == {}  # a named encoder has its own default
    assert settings.with_default_model(None, {"model": "given"}) == {"model": "given"}
    assert Settings(model=None).with_default_model(None, {}) == {}
