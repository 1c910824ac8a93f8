"""`docsearch serve`'s app (API and UI) on a real uvicorn in this process: both front ends open
collections through one registry, so a collection's encoder is loaded once; and the API reports
the mode that answered a search, not the one asked for.

In this process (not a child, as test_serve.py runs it) so the fake encoder's loads can be
counted; the app is the one `serve` builds (`serve_cmd.server_app`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.app.server import Client
from tests.fakes import CALLS
from tests.helpers import index_into
from tests.ui.browser import free_port

V1 = "/api/v1"
TEXTS = {
    "lease.md": "# Lease\n\nThe tenant pays rent monthly. Termination for cause needs notice.\n",
    "memo.md": "# Memo\n\nParking permits are issued by the office each spring.\n",
}


@dataclass
class Served:
    client: Client
    state: Any  # the ServerState
    ui: Any  # the UI's UIContext
    loads: int  # the fake encoder's loads before the server was made


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    import uvicorn

    from docsearch.app.api import ServerState
    from docsearch.app.keys import KeyStore
    from docsearch.app.serve_cmd import server_app
    from docsearch.config import Settings

    base = tmp_path_factory.mktemp("registry")
    db = str(base / "db")
    for name, encoder in (("vec", "hashing"), ("lex", "none")):
        folder = base / name
        folder.mkdir()
        for file, text in TEXTS.items():
            (folder / file).write_text(text)
        assert not index_into(db, folder, name, encoder=encoder).failed
    state = ServerState(Settings(db=db), KeyStore(base / "keys.json"))
    loads = CALLS["loads"]
    app = server_app(state, ui=True)
    assert app.ui is not None, "no UI mounted"
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield Served(Client("127.0.0.1", port), state, app.ui.context, loads)
    finally:
        server.should_exit = True
        thread.join(30)
        state.registry.close()


def _search(served: Served, name: str, query: str, **body: Any) -> dict[str, Any]:
    reply = served.client.post(f"{V1}/collections/{name}/search", {"query": query, **body})
    assert reply.status == 200, reply.body[:300]
    answer: dict[str, Any] = reply.json()
    return answer


def test_a_lexical_collection_searched_hybrid_reports_lexical(served: Served) -> None:
    answer = _search(served, "lex", "termination for cause", mode="hybrid")
    assert answer["hits"], answer
    assert answer["mode"] == "lexical" and answer["asked_mode"] == "hybrid"
    assert answer["fallback"] == "no vectors"
    assert not any("dense" in leg for hit in answer["hits"] for leg in hit["scores"])
    default = _search(served, "lex", "termination for cause")  # no mode: the default
    assert default["mode"] == "lexical" and default["fallback"] is None


def test_the_reported_mode_is_the_one_that_answered(served: Served) -> None:
    hybrid = _search(served, "vec", "termination for cause", mode="hybrid")
    assert (hybrid["mode"], hybrid["rule"], hybrid["fallback"]) == ("hybrid", "hybrid", None)
    assert any("dense" in leg for leg in hybrid["hits"][0]["scores"])
    # Key terms rank by the lexical legs alone: still hybrid's answer, and the rule says so.
    terms = _search(served, "vec", "rent; termination; notice; parking", mode="hybrid")
    assert (terms["mode"], terms["rule"]) == ("hybrid", "key-terms")
    assert not any("dense" in leg for hit in terms["hits"] for leg in hit["scores"])
    passages = _search(served, "vec", "rent", mode="vector", granularity="passage")
    assert (passages["mode"], passages["rule"]) == ("vector", "chunk")
    lex_doc = _search(served, "lex", "rent")["hits"][0]["doc_id"]
    body = {"doc_id": lex_doc, "mode": "hybrid"}
    similar = served.client.post(f"{V1}/collections/lex/similar", body).json()
    assert (similar["mode"], similar["fallback"]) == ("lexical", "no vectors")


def test_the_ui_and_the_api_load_the_collections_encoder_once(served: Served) -> None:
    from docsearch.app.web.actions import Filters, Picked

    for _ in range(2):
        assert _search(served, "vec", "parking permits", mode="hybrid")["hits"]
        found = served.ui.search("parking permits", "vec", "hybrid", 5, Filters())
        assert found.hits and found.mode == "hybrid"
    lexical = served.ui.search("parking permits", "lex", "hybrid", 5, Filters())
    assert lexical.mode == "lexical (no vectors)"
    more = served.ui.similar(Picked(found.hits[0], "vec", "parking permits"), "hybrid", 3)
    assert more.mode == "hybrid"
    # One load in the process: when the server first opened "vec" (here or in a test before).
    assert CALLS["loads"] - served.loads == 1
    assert served.state.registry.encoder_loads == 1
    assert served.ui.registry is served.state.registry


def test_closing_a_retriever_ends_its_query_thread(served: Served) -> None:
    from docsearch.config import Settings
    from docsearch.retriever import Retriever

    db = served.state.settings.db
    before = set(threading.enumerate())  # the server's own Retrievers' threads among them
    with Retriever("vec", settings=Settings(db=db)) as retriever:
        assert retriever.search("parking permits", k=2, mode="hybrid")
        running = [t for t in threading.enumerate() if t not in before]
        assert any(t.name.startswith("docsearch-query") for t in running)
    assert not any(t.is_alive() for t in running)
    assert retriever.search("rent", k=1, mode="hybrid")  # searching after close still works
    retriever.close()
