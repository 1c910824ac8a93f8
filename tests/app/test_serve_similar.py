"""`docsearch serve`'s more-like-this routes, through a real server on 127.0.0.1.

`POST /collections/{name}/similar` takes a document of the collection by doc id, `.../similar/file`
an uploaded file (multipart, any supported format). The collection is the pump corpus of
tests/test_similar.py (a report, its near copy, a manual whose third page is about the pump, and
unrelated documents); a second collection checks that keys are scoped as for search. Every
refusal must be JSON with a 4xx status, never a 500.
"""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.app.server import Client, Reply, expect_error, served
from tests.helpers import index_into, make_docx, make_pdf
from tests.test_similar import PUMP, _corpus

V1 = "/api/v1"


@dataclass
class Site:
    client: Client
    root: Path
    db: str
    keys: dict[str, str]

    def as_(self, role: str | None) -> Client:
        return Client(self.client.host, self.client.port, self.keys[role] if role else None)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from docsearch.app.keys import KeyStore

    base = tmp_path_factory.mktemp("serve-similar")
    _corpus(base / "docs")
    db = str(base / "db")
    index_into(db, base / "docs", "pumps", options={"max_tokens": 40})
    (base / "other").mkdir()
    (base / "other" / "memo.md").write_text("# Memo\n\nA memo on parking permits.\n")
    index_into(db, base / "other", "other")
    store = KeyStore(base / "keys.json")
    keys = {role: store.create((role,))[0] for role in ("pumps", "other")}
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_KEYS": str(store.path)}
    env |= {"DOCSEARCH_HOME": str(base / "home"), "DOCSEARCH_ENCODER": "hashing"}
    with served(env, log=base / "serve.log") as client:
        yield Site(client, base / "docs", db, keys)
    log = (base / "serve.log").read_text()
    assert "Traceback" not in log, log


def _upload(
    client: Client,
    name: str,
    data: bytes,
    fields: dict[str, str] | None = None,
    collection: str = "pumps",
) -> Reply:
    """A multipart POST of one file (as `curl -F file=@NAME` sends it) and form fields."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
        for key, value in (fields or {}).items()
    ]
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body = b"".join([*parts, head, data, f"\r\n--{boundary}--\r\n".encode()])
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    if client.key:
        headers["Authorization"] = f"Bearer {client.key}"
    connection = http.client.HTTPConnection(client.host, client.port, timeout=120)
    try:
        connection.request("POST", f"{V1}/collections/{collection}/similar/file", body, headers)
        response = connection.getresponse()
        raw = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, raw)
    finally:
        connection.close()


def _doc_id(site: Site, name: str) -> str:
    from docsearch.store.reads import Store

    path = str(site.root / name)
    rows = list(Store.open(site.db, "pumps").documents(["doc_id", "path"]))
    return next(r["doc_id"] for r in rows if r["path"] == path)


def _names(reply: Reply) -> list[str]:
    assert reply.status == 200, reply.body[:300]
    return [Path(h["path"]).name for h in reply.json()["hits"]]


def test_more_like_a_document_of_the_collection(site: Site) -> None:
    from docsearch.config import Settings
    from docsearch.retriever import Retriever

    report = _doc_id(site, "report.md")
    reply = site.as_("pumps").post(f"{V1}/collections/pumps/similar", {"doc_id": report, "k": 5})
    names = _names(reply)
    assert names[0] == "report_copy.txt" and "report.md" not in names
    answer = reply.json()
    assert answer["query"] == {"doc_id": report, "path": str(site.root / "report.md")}
    assert answer["mode"] == "hybrid"
    expected = Retriever("pumps", settings=Settings(db=site.db)).similar(
        str(site.root / "report.md"), k=5
    )
    assert [h["doc_id"] for h in answer["hits"]] == [h.doc_id for h in expected]
    best = answer["hits"][0]
    assert "strainer" in best["terms"]
    pair = best["pairs"][0]
    assert (
        pair["by"] == "vectors" and pair["query"]["pages"] == "1" and pair["match"]["pages"] == "1"
    )
    lexical = site.as_("pumps").post(
        f"{V1}/collections/pumps/similar", {"doc_id": report, "mode": "lexical"}
    )
    assert lexical.json()["mode"] == "lexical" and _names(lexical)[0] == "report_copy.txt"
    assert lexical.json()["hits"][0]["pairs"][0]["by"] == "terms"


def _as_format(path: Path, fmt: str) -> bytes:
    if fmt == "pdf":
        make_pdf(path, ["A string quartet rehearsed in the chapel.", "\n".join(PUMP)])
    elif fmt == "docx":
        make_docx(path, [(1, "Pump notes"), *[(0, p) for p in PUMP]])
    elif fmt == "html":
        path.write_text("<html><body>" + "".join(f"<p>{p}</p>" for p in PUMP) + "</body></html>")
    else:
        path.write_text("\n\n".join(PUMP) + "\n")
    return path.read_bytes()


@pytest.mark.parametrize("fmt", ["txt", "md", "html", "docx", "pdf"])
def test_more_like_an_uploaded_file_in_every_format(site: Site, tmp_path: Path, fmt: str) -> None:
    data = _as_format(tmp_path / f"case.{fmt}", fmt)
    reply = _upload(site.as_("pumps"), f"case.{fmt}", data, {"k": "3", "mode": "lexical"})
    assert set(_names(reply)[:2]) == {"report.md", "report_copy.txt"}
    answer = reply.json()
    assert answer["query"] == {"doc_id": None, "path": f"case.{fmt}"}
    pair = answer["hits"][0]["pairs"][0]
    assert pair["query"]["pages"] == ("2" if fmt == "pdf" else "1")
    assert pair["query"]["path"] == f"case.{fmt}"  # the client's name, no server path


def test_an_upload_may_exceed_the_search_body_limit(site: Site) -> None:
    from docsearch.app.api import MAX_BODY_BYTES

    long = ("\n\n".join(PUMP) + "\n\n") * (MAX_BODY_BYTES // 300)
    assert len(long) > MAX_BODY_BYTES
    assert _names(_upload(site.as_("pumps"), "long.txt", long.encode(), {"k": "2"}))[0] in {
        "report.md",
        "report_copy.txt",
    }


def test_the_schema_lists_both_routes(site: Site) -> None:
    paths = site.as_(None).get("/openapi.json").json()["paths"]
    assert {f"{V1}/collections/{{name}}/similar", f"{V1}/collections/{{name}}/similar/file"} <= set(
        paths
    )


def test_keys_are_checked_and_scoped_as_for_search(site: Site) -> None:
    body = {"doc_id": _doc_id(site, "report.md")}
    for client in (site.as_(None), Client(site.client.host, site.client.port, "ds_wrong")):
        assert "key" in expect_error(client.post(f"{V1}/collections/pumps/similar", body), 401)
        assert "key" in expect_error(_upload(client, "a.txt", b"pump impeller"), 401)
    other = site.as_("other")
    assert "pumps" in expect_error(other.post(f"{V1}/collections/pumps/similar", body), 403)
    assert "pumps" in expect_error(_upload(other, "a.txt", b"pump impeller"), 403)
    # a doc id of one collection finds nothing in another
    assert "no document" in expect_error(other.post(f"{V1}/collections/other/similar", body), 404)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"doc_id": "0123456789abcdef"}, 404, "no document"),  # well formed, not held
        ({"doc_id": "../../etc/passwd"}, 422, "doc_id"),  # the schema's pattern: 16 hex digits
        ({"doc_id": "report.md"}, 422, "doc_id"),  # never a path on the server
        ({}, 422, "doc_id"),
        ({"doc_id": "REPORT", "k": 0}, 422, "k"),
        ({"doc_id": "REPORT", "k": 10**9}, 422, "k"),
        ({"doc_id": "REPORT", "mode": "telepathic"}, 422, "mode"),
        ({"doc_id": "REPORT", "surprise": 1}, 422, "surprise"),
    ],
)
def test_bad_similar_input_is_a_4xx_json_error(
    site: Site, body: dict[str, Any], status: int, says: str
) -> None:
    if body.get("doc_id") == "REPORT":
        body = {**body, "doc_id": _doc_id(site, "report.md")}
    reply = site.as_("pumps").post(f"{V1}/collections/pumps/similar", body)
    assert says in expect_error(reply, status).lower()


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("empty.txt", b"", "empty"),
        ("blank.md", b"   \n\n  ", "empty"),
        ("dashes.txt", b"---- !!! ____\n", "no words to compare"),
        ("corrupt.pdf", b"%PDF-1.7\n1 0 obj garbage\x00\xff" * 3, "pdf"),
        ("sheet.xlsx", b"PK\x03\x04", "corrupt xlsx"),
        ("sheet.numbers", b"PK\x03\x04", "unsupported file type"),
        ("noextension", b"pump impeller", "unsupported file type"),
    ],
)
def test_an_empty_or_unreadable_upload_is_one_clear_400(
    site: Site, name: str, data: bytes, says: str
) -> None:
    assert says in expect_error(_upload(site.as_("pumps"), name, data), 400).lower()


def test_malformed_uploads_are_4xx_json_errors(site: Site) -> None:
    client = site.as_("pumps")
    expect_error(_upload(client, "a.txt", b"pump impeller", {"k": "zero"}), 422)
    expect_error(_upload(client, "a.txt", b"pump impeller", {"mode": "telepathic"}), 422)
    not_multipart = client.post(f"{V1}/collections/pumps/similar/file", {"file": "a.txt"})
    assert not_multipart.status == 422 and not_multipart.json()["error"]
    assert "nowhere" in expect_error(_upload(client, "a.txt", b"pump", collection="nowhere"), 403)


def test_a_declared_upload_over_the_limit_is_refused_before_it_is_read(site: Site) -> None:
    from docsearch.app.api import MAX_UPLOAD_BYTES

    connection = http.client.HTTPConnection(site.client.host, site.client.port, timeout=30)
    connection.putrequest("POST", f"{V1}/collections/pumps/similar/file")
    connection.putheader("Content-Length", str(2 * MAX_UPLOAD_BYTES))
    connection.putheader("Content-Type", "multipart/form-data; boundary=x")
    connection.putheader("Authorization", f"Bearer {site.keys['pumps']}")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and "error" in json.loads(response.read())
    connection.close()
