"""Pin cites: a hit whose chunk spans pages 1-2 but whose marked words are on page 2 says
`p. 2`, in the CLI, JSON (`page` beside `page_start`/`page_end`), the UI and the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docsearch.retriever import Retriever
from tests.helpers import index_into, make_pdf, run_cli

QUERY = "indemnify structural defects"


@pytest.fixture(scope="module")
def lease(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("pin") / "docs"
    root.mkdir()
    make_pdf(
        root / "lease.pdf",
        [
            "Residential lease between the parties.\nRent is paid monthly.",
            f"The landlord shall {QUERY}.",
        ],
    )
    db = str(root.parent / "db")
    index_into(db, root, options={"max_tokens": 200})  # one chunk over both pages
    return db, root


def test_the_hit_names_the_page_of_its_marked_words(lease: tuple[str, Path]) -> None:
    db, _ = lease
    hit = Retriever("c", db=db).search(QUERY, k=1, mode="lexical")[0]
    assert (hit.page_start, hit.page_end) == (1, 2)  # one chunk over both pages...
    assert (hit.page, hit.cite, hit.pages) == (2, "2", "1-2")  # ...cited where the words are
    as_json = hit.as_dict()
    assert (as_json["page"], as_json["page_start"], as_json["page_end"]) == (2, 1, 2)
    opening = Retriever("c", db=db).search("residential lease rent", k=1, mode="lexical")[0]
    assert (opening.page, opening.cite) == (1, "1")


def test_cli_text_and_json_cite_page_2(lease: tuple[str, Path]) -> None:
    db, _ = lease
    common = ("search", QUERY, "--db", db, "--collection", "c", "--mode", "lexical", "-k", "1")
    text = run_cli(*common)
    assert text.returncode == 0, text.stderr
    assert "p. 2 " in text.stdout and "p. 1-2" not in text.stdout
    data = json.loads(run_cli(*common, "--json").stdout)
    assert (data[0]["page"], data[0]["page_start"], data[0]["page_end"]) == (2, 1, 2)


def test_ui_hit_cites_page_2(lease: tuple[str, Path]) -> None:
    from docsearch.app.web.actions import hit_html

    db, root = lease
    hit = Retriever("c", db=db).search(QUERY, k=1, mode="lexical")[0]
    shown = hit_html(1, hit, "c", str(root))
    assert '<span class="ds-pages">p. 2</span>' in shown and 'data-page="2"' in shown


def test_api_hit_cites_page_2(lease: tuple[str, Path], tmp_path: Path) -> None:
    from docsearch.app.keys import KeyStore
    from tests.app.server import Client, served

    db, root = lease
    store = KeyStore(tmp_path / "keys.json")
    key = store.create(("c",), False)[0]
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_KEYS": str(store.path)}
    env |= {"DOCSEARCH_HOME": str(tmp_path / "home"), "DOCSEARCH_ENCODER": "hashing"}
    with served(env, "--root", str(root)) as client:
        reply = Client(client.host, client.port, key).post(
            "/api/v1/collections/c/search", {"query": QUERY, "k": 1, "mode": "lexical"}
        )
    hit = reply.json()["hits"][0]
    assert (hit["page"], hit["page_start"], hit["page_end"]) == (2, 1, 2)
