"""One real collection of the sample corpus (hashing fake encoder), shared by the adapter tests."""

from __future__ import annotations

import pytest

from tests.helpers import index_samples

QUERY = "motor stall error code E-MOT-21"
PUMP_MANUAL = "x200-infusion-pump-service-manual.txt"


@pytest.fixture(scope="package")
def samples_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return index_samples(tmp_path_factory.mktemp("integrations"))
