"""`docsearch serve` while its collection changes under it, through the real server: searches
racing index runs that delete files never get a 5xx; a page's text comes from the store, not
from the file (which may be gone or changed since it was indexed)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.app.server import Client, served
from tests.helpers import index_into, make_pdf

V1 = "/api/v1"
TOPIC = "The orchard lease requires the tenant to prune the walnut trees each winter."


@dataclass
class Site:
    client: Client
    db: str
    folder: Path
    base: Path


def _write(folder: Path, n: int) -> None:
    (folder / f"lease{n:02}.md").write_text(f"# Lease {n}\n\n{TOPIC} Clause {n}.\n\n{TOPIC}\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("races")
    folder, db = base / "leases", str(base / "db")
    folder.mkdir()
    for n in range(30):
        _write(folder, n)
    index_into(db, folder, "race")
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_HOME": str(base / "home")}
    env |= {"DOCSEARCH_KEYS": str(base / "keys.json"), "DOCSEARCH_ENCODER": "hashing"}
    with served(env, "--no-ui", log=base / "serve.log") as client:
        yield Site(client, db, folder, base)
    log = (base / "serve.log").read_text()
    assert "Traceback" not in log, log


def _churn(site: Site, stop: threading.Event) -> int:
    """Delete a few files and index, then bring them back and index, until told to stop."""
    rounds, rng = 0, random.Random(7)
    while not stop.is_set():
        gone = rng.sample(range(30), 6)
        for n in gone:
            (site.folder / f"lease{n:02}.md").unlink()
        index_into(site.db, site.folder, "race")
        for n in gone:
            _write(site.folder, n)
        index_into(site.db, site.folder, "race")
        rounds += 1
    return rounds


@pytest.mark.parametrize(
    "searches",
    [pytest.param(300, id="300"), pytest.param(10_000, id="10k", marks=pytest.mark.slow)],
)
def test_searches_racing_deletions_never_get_a_5xx(site: Site, searches: int) -> None:
    # Every search is answered, and none with a 5xx; a 503 with Retry-After (load shed when the
    # machine is too busy to answer within the queue's deadline) is retried, as clients should.
    stop, statuses, errors, shed = threading.Event(), Counter[int](), [], [0]
    bodies = [
        {"query": "prune the walnut trees", "mode": mode, "granularity": granularity, "k": 20}
        for mode in ("hybrid", "lexical", "vector")
        for granularity in ("document", "passage")
    ]

    def search(count: int) -> None:
        for i in range(count):
            reply = site.client.post(f"{V1}/collections/race/search", bodies[i % len(bodies)])
            while reply.status == 503 and "retry-after" in reply.headers:  # shed: a busy machine
                shed[0] += 1
                time.sleep(int(reply.headers["retry-after"]))
                reply = site.client.post(f"{V1}/collections/race/search", bodies[i % len(bodies)])
            statuses[reply.status] += 1
            if reply.status >= 500:
                errors.append(reply.body[:300])

    rounds: list[int] = []
    churner = threading.Thread(target=lambda: rounds.append(_churn(site, stop)))
    churner.start()
    clients = [threading.Thread(target=search, args=(searches // 4,)) for _ in range(4)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    stop.set()
    churner.join()
    print(f"{searches} searches: {dict(statuses)}, {shed[0]} shed and retried, {rounds} churns")
    assert rounds and rounds[0] >= 1
    assert not errors and statuses == {200: searches // 4 * 4}, (statuses, shed, errors[:3])


def test_page_text_comes_from_the_store_not_the_file(site: Site) -> None:
    folder = site.base / "pdfs"
    folder.mkdir()
    pages = [
        "Opening page of the deed.",
        "Page two: the easement runs along the north wall.",
        "End.",
    ]
    pdf = make_pdf(folder / "deed.pdf", pages)
    index_into(site.db, folder, "deeds")
    query = {"query": "easement north wall", "mode": "lexical"}
    hit = site.client.post(f"{V1}/collections/deeds/search", query).json()["hits"][0]
    url = f"{V1}/collections/deeds/documents/{hit['doc_id']}/pages"
    pdf.write_bytes(b"%PDF-1.4 changed since it was indexed")  # the file says otherwise now
    assert site.client.get(f"{url}/2").json()["text"] == pages[1]
    pdf.unlink()  # and then it is gone
    assert [site.client.get(f"{url}/{n}").json()["text"] for n in (1, 2, 3)] == pages
    reply = site.client.get(f"{url}/4")
    assert reply.status == 404 and "the document has 3" in reply.json()["error"]
    assert site.client.get(f"{url}/0").status == 422  # the schema's path pattern: pages from 1
