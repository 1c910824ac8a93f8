"""LangChain's own retriever contract (`langchain-tests`) run against `DocsearchRetriever` on a
real collection of the sample corpus: constructor `k`, per-call `k`, sync and async `invoke`."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402

from docsearch.integrations.langchain import DocsearchRetriever  # noqa: E402


# The suite's async test is a bare `async def`: AnyIO's pytest plugin runs the class's coroutine
# tests on asyncio (and leaves the sync ones alone), with no project-wide "auto" async mode.
@pytest.mark.anyio
class TestDocsearchRetrieverStandard(RetrieversIntegrationTests):
    db: str

    @pytest.fixture(autouse=True)
    def _samples(self, samples_db: str) -> None:
        # The suite builds retrievers from a property, so the collection's path is kept on the
        # test instance (pytest binds class fixtures to the instance the test runs on).
        self.db = samples_db

    @property
    def retriever_constructor(self) -> type[DocsearchRetriever]:
        return DocsearchRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"collection": "samples", "db": self.db}

    @property
    def retriever_query_example(self) -> str:
        return "termination for cause"
