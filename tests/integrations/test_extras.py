"""The `test` extra (what CI installs) brings every library the integration tests import, so
they run in CI instead of skipping themselves."""

from __future__ import annotations

import re
import tomllib

from tests.helpers import REPO


def test_the_test_extra_installs_the_adapters_libraries_and_a_pinned_standard_suite() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    test_extra = pyproject["project"]["optional-dependencies"]["test"]
    names = {re.split(r"[<>=!~\[ ;]", requirement)[0] for requirement in test_extra}
    assert {"langchain-core", "llama-index-core", "langchain-tests"} <= names
    assert "langchain-tests==1.1.9" in test_extra
