"""One real collection of the sample corpus (hashing fake encoder), shared by the adapter tests."""

from __future__ import annotations

import pytest

from docsearch.indexer.collection import prepare
from docsearch.indexer.pipeline import index_folder
from tests.helpers import copy_samples

QUERY = "motor stall error code E-MOT-21"
PUMP_MANUAL = "x200-infusion-pump-service-manual.txt"


@pytest.fixture(scope="package")
def samples_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = copy_samples(tmp_path_factory.mktemp("integrations") / "samples")
    db = str(root.parent / "db")
    p = prepare(
        db,
        "samples",
        encoder_name="hashing",
        options={"max_tokens": 120},
        default_encoder="hashing",
        cap=None,
        overlap=0,
    )
    report = index_folder(root, p.store, p.encoder, p.chunker)
    assert not report.failed
    return db
