"""The README does not contradict itself about what docsearch does."""

from __future__ import annotations

import re

from tests.helpers import REPO


def test_the_readme_does_not_call_the_encoder_switch_missing() -> None:
    readme = (REPO / "README.md").read_text()
    assert "--switch" in readme  # documented (Encoders), and built (indexer/service.py)
    missing = re.compile(r"not yet:[^\n]*switch[^\n]*encoder|not yet:[^\n]*encoder[^\n]*switch")
    assert not missing.search(readme.lower()), missing.search(readme.lower())
