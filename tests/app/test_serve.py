"""`docsearch serve` as a real server on 127.0.0.1: every endpoint, every key case, bad input.

Three collections (`docs`: a PDF, Markdown, a symlink out of the folder; `other`; `jobs`, for
index jobs) and four keys: docs only, other only, docs with --index, and every collection.
Every answer, refusals included, must be JSON with a 4xx status, never a 500.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.app.server import Client, Reply, expect_error, finished, served
from tests.helpers import index_into
from tests.ui.corpus import SECRET, Corpus, build_corpus

V1 = "/api/v1"


@dataclass
class Site:
    client: Client
    corpus: Corpus
    keys: dict[str, str]  # role -> key
    jobs_folder: Path
    keys_path: Path

    def as_(self, role: str | None) -> Client:
        return Client(self.client.host, self.client.port, self.keys[role] if role else None)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from docsearch.app.keys import KeyStore

    base = tmp_path_factory.mktemp("serve")
    corpus = build_corpus(base / "corpus")
    index_into(corpus.db, corpus.docs, "docs")
    other, jobs = corpus.root / "other", corpus.root / "jobs"
    for folder, text in ((other, "A memo on parking permits."), (jobs, "Rent is due monthly.")):
        folder.mkdir()
        (folder / "memo.md").write_text(f"# Memo\n\n{text}\n")
    index_into(corpus.db, other, "other")
    index_into(corpus.db, jobs, "jobs")
    store = KeyStore(base / "keys.json")
    roles = {"docs": (("docs",), False), "other": (("other",), False)}
    roles |= {"indexer": (("docs", "jobs", "fresh"), True), "all": (("*",), False)}
    keys = {role: store.create(names, index)[0] for role, (names, index) in roles.items()}
    env = {"DOCSEARCH_DB": corpus.db, "DOCSEARCH_KEYS": str(store.path)}
    env |= {"DOCSEARCH_HOME": str(base / "home"), "DOCSEARCH_ENCODER": "hashing"}
    (base / "watched").mkdir()
    args = ("--root", str(corpus.root), "--watch", str(base / "watched"))
    with served(env, *args, log=base / "serve.log") as client:
        yield Site(client, corpus, keys, jobs, store.path)
    log = (base / "serve.log").read_text()
    assert "Traceback" not in log, log


def _search(client: Client, name: str = "docs", **body: Any) -> Reply:
    return client.post(f"{V1}/collections/{name}/search", {"query": "termination", **body})


# ---------------------------------------------------------------------------------------------
# Keys


def test_health_and_the_schema_need_no_key(site: Site) -> None:
    assert site.as_(None).get(f"{V1}/health").json()["status"] == "ok"
    schema = site.as_(None).get("/openapi.json").json()
    assert f"{V1}/collections/{{name}}/search" in schema["paths"]
    assert f"{V1}/index-jobs/{{job_id}}" in schema["paths"]
    docs = site.as_(None).get("/docs")
    assert docs.status == 200 and b"openapi.json" in docs.body


def test_no_key_and_a_wrong_key_get_401(site: Site) -> None:
    for client in (site.as_(None), Client(site.client.host, site.client.port, "ds_wrong")):
        for reply in (_search(client), client.get(f"{V1}/collections")):
            assert "key" in expect_error(reply, 401)
            assert reply.headers["www-authenticate"] == "Bearer"
    prefix = Client(site.client.host, site.client.port, site.keys["docs"][:-1])
    expect_error(_search(prefix), 401)


def test_a_key_for_another_collection_gets_403_and_sees_only_its_own(site: Site) -> None:
    other = site.as_("other")
    assert "docs" in expect_error(_search(other), 403)
    assert "docs" in expect_error(other.get(f"{V1}/collections/docs"), 403)
    assert "nowhere" in expect_error(
        other.get(f"{V1}/collections/nowhere"), 403
    )  # no existence leak
    assert [c["name"] for c in other.get(f"{V1}/collections").json()] == ["other"]
    assert _search(other, "other", query="parking").status == 200


def test_a_read_only_key_cannot_start_an_index_job(site: Site) -> None:
    assert "index" in expect_error(site.as_("docs").post(f"{V1}/collections/docs/index-jobs"), 403)


def test_a_revoked_key_is_refused_from_the_next_request_on(site: Site) -> None:
    from docsearch.app.keys import KeyStore

    store = KeyStore(site.keys_path)
    key, record = store.create(("docs",))
    client = Client(site.client.host, site.client.port, key)
    assert _search(client).status == 200
    store.revoke(record.id)
    expect_error(_search(client), 401)


# ---------------------------------------------------------------------------------------------
# Endpoints, with the right key


def test_search_answers_the_retrievers_hits_with_per_leg_scores(site: Site) -> None:
    from docsearch.config import Settings
    from docsearch.retriever import Retriever

    reply = _search(site.as_("docs"), k=3, query="termination for cause")
    assert reply.status == 200
    found = reply.json()["hits"]
    expected = Retriever("docs", settings=Settings(db=site.corpus.db)).search(
        "termination for cause", k=3
    )
    assert [h["chunk_id"] for h in found] == [h.chunk_id for h in expected]
    assert found[0]["path"] == site.corpus.doc("policy.pdf")
    assert set(found[0]["scores"]) == {"dense", "lexical", "doc_dense", "doc_lexical", "fused"}
    for got, want in zip(found, expected, strict=True):
        assert got["score"] == pytest.approx(want.score, rel=1e-6)
    passages = _search(site.as_("docs"), granularity="passage", mode="lexical").json()
    assert passages["mode"] == "lexical" and passages["hits"]
    narrowed = _search(site.as_("docs"), where="title = 'Notes'", query="the").json()["hits"]
    assert narrowed and all(h["title"] == "Notes" for h in narrowed)


def test_collections_list_and_info(site: Site) -> None:
    everyone = site.as_("all")
    names = [c["name"] for c in everyone.get(f"{V1}/collections").json()]
    assert {"docs", "jobs", "other"} <= set(names) and "docs" not in names[1:]
    info = everyone.get(f"{V1}/collections/docs").json()
    assert info["files"] == 3 and info["failed_files"] == 1 and info["encoder_spec"]


def test_serve_watch_keeps_a_folder_indexed(site: Site) -> None:
    watched = Path(site.corpus.db).parent.parent / "watched"
    (watched / "minutes.md").write_text("# Minutes\n\nThe board approved the budget.\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reply = _search(site.as_("all"), "watched", query="board budget")
        if reply.status == 200 and reply.json()["hits"]:
            assert reply.json()["hits"][0]["title"] == "Minutes"
            return
        time.sleep(0.3)
    raise AssertionError(f"never indexed: {reply.status} {reply.body[:200]!r}")


def _policy(site: Site) -> dict[str, Any]:
    hit = _search(site.as_("docs"), query="termination for cause").json()["hits"][0]
    assert hit["path"] == site.corpus.doc("policy.pdf")
    return hit


def test_documents_metadata_passages_pages_and_the_original(site: Site) -> None:
    client, hit = site.as_("docs"), _policy(site)
    url = f"{V1}/collections/docs/documents/{hit['doc_id']}"
    doc = client.get(url).json()
    assert doc["path"] == hit["path"] and doc["pages"] == 3
    assert doc["record"]["status"] == "indexed" and doc["record"]["sha256"]
    assert hit["chunk_id"] in [p["id"] for p in doc["passages"]]
    assert "thirty days to cure" in client.get(f"{url}/pages/2").json()["text"]
    expect_error(client.get(f"{url}/pages/4"), 404)
    original = client.get(f"{url}/file")
    assert original.status == 200 and original.headers["content-type"] == "application/pdf"
    assert original.body == Path(hit["path"]).read_bytes()


def test_the_original_is_refused_once_the_file_changed(site: Site, tmp_path: Path) -> None:
    notes = Path(site.corpus.doc("notes.md"))
    hit = _search(site.as_("docs"), query="escrow auditor").json()["hits"][0]
    assert hit["path"] == str(notes)
    saved = notes.read_bytes()
    try:
        notes.write_text(f"{SECRET}\n")
        url = f"{V1}/collections/docs/documents/{hit['doc_id']}/file"
        assert "changed" in expect_error(site.as_("docs").get(url), 403)
    finally:
        notes.write_bytes(saved)


def test_an_index_job_runs_reports_progress_and_its_result(site: Site) -> None:
    client = site.as_("indexer")
    (site.jobs_folder / "lease.md").write_text("# Lease\n\nThe lease renews every spring.\n")
    started = client.post(f"{V1}/collections/jobs/index-jobs")
    assert started.status == 202, started.body
    job = finished(client, started.json()["url"])
    assert job["state"] == "done" and job["error"] is None, job
    assert job["result"]["new"] == 1 and job["result"]["unchanged"] == 1
    assert job["files_total"] == 1 and job["files_done"] == 1
    assert _search(client, "jobs", query="lease renews").json()["hits"][0]["title"] == "Lease"
    assert "no index job" in expect_error(site.as_("other").get(started.json()["url"]), 404)


def test_an_index_job_for_a_folder_under_the_root_makes_a_new_collection(site: Site) -> None:
    reader = site.as_("all")  # reads every collection but may not index
    assert "index" in expect_error(reader.post(f"{V1}/collections/fresh/index-jobs"), 403)
    indexer = site.as_("indexer")
    assert "folder" in expect_error(indexer.post(f"{V1}/collections/fresh/index-jobs"), 404)
    source = site.corpus.root / "fresh-source"
    source.mkdir()
    (source / "memo.md").write_text("# Memo\n\nVisitor parking permits expire in May.\n")
    started = indexer.post(f"{V1}/collections/fresh/index-jobs", {"folder": "fresh-source"})
    assert started.status == 202, started.body
    assert finished(indexer, started.json()["url"])["result"]["new"] == 1
    hits = _search(indexer, "fresh", query="parking permits").json()["hits"]
    assert hits[0]["path"] == str(source / "memo.md")


def test_an_index_job_is_refused_while_the_writer_lock_is_held(site: Site) -> None:
    from docsearch.store.database import Database

    with Database(site.corpus.db).writer_lock("jobs"):
        reply = site.as_("indexer").post(f"{V1}/collections/jobs/index-jobs")
        assert "being indexed" in expect_error(reply, 409)


# ---------------------------------------------------------------------------------------------
# Bad input: a 4xx JSON error, never a 500


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"k": 10**9}, 422, "k"),
        ({"k": 0}, 422, "k"),
        ({"k": "ten"}, 422, "k"),
        ({"query": ""}, 422, "query"),
        ({"query": "   \x00  "}, 400, "empty query"),
        ({"query": "x" * 10_001}, 422, "query"),
        ({"query": "x " * 500_000}, 413, "body"),
        ({"where": "page_start >= ((("}, 400, "filter"),
        ({"where": "1=1; DROP TABLE chunks"}, 400, "filter"),
        ({"mode": "telepathic"}, 422, "mode"),
        ({"granularity": "sentence"}, 422, "granularity"),
        ({"surprise": 1}, 422, "surprise"),
    ],
)
def test_bad_search_input_is_a_4xx_json_error(
    site: Site, body: dict[str, Any], status: int, says: str
) -> None:
    assert says in expect_error(_search(site.as_("docs"), **body), status).lower()


def test_malformed_bodies_are_4xx_json_errors(site: Site) -> None:
    client = site.as_("docs")
    url = f"{V1}/collections/docs/search"
    expect_error(client.post(url, b"{not json"), 422)
    expect_error(client.post(url, b"[1, 2]"), 422)
    expect_error(client.post(url, b"\xff\xfe garbage"), 422)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/documents/..%2F..%2F..%2Fetc%2Fpasswd", 404),  # no route has that many parts
        ("/documents/../../../etc/passwd", 404),
        ("/documents/%2E%2E", 422),  # not 16 hex digits: the schema's pattern
        ("/documents/0123456789abcdef", 404),  # well formed, not in the collection
        ("/documents/0123456789ABCDEF/file", 422),
        ("/documents/0123456789abcdef/pages/1", 404),
    ],
)
def test_dotted_and_unknown_document_ids_are_4xx(site: Site, path: str, status: int) -> None:
    reply = site.as_("docs").get(f"{V1}/collections/docs{path}")
    assert reply.status == status and reply.json()["error"]


def test_dotted_index_folders_and_paths_are_refused(site: Site) -> None:
    indexer = site.as_("indexer")
    for folder in ("../outside", "/etc", "jobs/../../outside"):
        reply = indexer.post(f"{V1}/collections/jobs/index-jobs", {"folder": folder})
        assert "under" in expect_error(reply, 403)
    dotted = _search(site.as_("docs"), path="../outside/*", query="launch codes")
    assert dotted.status == 200 and dotted.json()["hits"] == []


def test_unknown_and_invalid_collections_are_4xx(site: Site) -> None:
    everyone = site.as_("all")
    assert "nowhere" in expect_error(_search(everyone, "nowhere"), 404)
    assert "nowhere" in expect_error(everyone.get(f"{V1}/collections/nowhere"), 404)
    expect_error(everyone.get(f"{V1}/collections/nowhere/documents/0123456789abcdef"), 404)
    assert "name" in expect_error(_search(everyone, "bad%20name"), 422)
    expect_error(everyone.get(f"{V1}/collections/..%2F..%2Fetc"), 404)
    expect_error(everyone.get(f"{V1}/no/such/route"), 404)


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(site: Site) -> None:
    import http.client

    connection = http.client.HTTPConnection(site.client.host, site.client.port, timeout=30)
    connection.putrequest("POST", f"{V1}/collections/docs/search")
    connection.putheader("Content-Length", str(10**9))
    connection.putheader("Authorization", f"Bearer {site.keys['docs']}")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and b"error" in response.read()
    connection.close()
