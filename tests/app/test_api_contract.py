"""The REST API keeps its contract, through a real `docsearch serve`: errors tell a caller only
what its key may know, methods a route lacks get 405 with `Allow`, a chunked body over the
limit gets 413, `DOCSEARCH_ENCODER=none` makes lexical collections, and the server matches its
own OpenAPI schema (schemathesis, every check, with a full key, a scoped key and none: slow).
"""

from __future__ import annotations

import http.client
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.app.server import Client, Reply, expect_error, finished, served
from tests.helpers import REPO, index_into, run_cli

V1 = "/api/v1"


@dataclass
class Site:
    base: Path
    root: Path
    db: str
    client: Client
    keys: dict[str, str]  # role -> key

    def as_(self, role: str | None) -> Client:
        return Client(self.client.host, self.client.port, self.keys[role] if role else None)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from docsearch.app.keys import KeyStore

    base = tmp_path_factory.mktemp("contract")
    root, db = base / "root", str(base / "db")
    for folder, text in (("a", "alpha apples"), ("b", "bravo bananas"), ("c", "charlie")):
        (root / folder).mkdir(parents=True)
        (root / folder / f"{folder}.md").write_text(f"# Note {folder}\n\n{text} grow here.\n")
        index_into(db, root / folder, f"coll{folder}")
    store = KeyStore(base / "keys.json")
    keys = {"full": store.create(("*",), index=True)[0]}
    keys["scoped"] = store.create(("collc", "newc"), index=True)[0]
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_KEYS": str(store.path)}
    env |= {"DOCSEARCH_HOME": str(base / "home"), "DOCSEARCH_ENCODER": "none"}
    with served(env, "--root", str(root), "--no-ui", log=base / "serve.log") as client:
        yield Site(base, root, db, client, keys)
    log = (base / "serve.log").read_text()
    assert "Traceback" not in log, log


# ---------------------------------------------------------------------------------------------
# Errors name no server path and no collection the key cannot see


def _doc_id(site: Site, name: str) -> str:
    reply = site.as_("full").post(f"{V1}/collections/{name}/search", {"query": "grow"})
    return str(reply.json()["hits"][0]["doc_id"])


def _refusals(site: Site) -> list[tuple[str, str, Any, str]]:
    """(role, method, path, body) for a bad request to every route."""
    doc = _doc_id(site, "collc")
    c = f"{V1}/collections"
    return [
        ("scoped", "GET", f"{c}/nowhere", None),  # its key names it, it does not exist
        ("full", "GET", f"{c}/nowhere", None),
        ("scoped", "GET", f"{c}/collb", None),
        ("full", "POST", f"{c}/nowhere/search", {"query": "x"}),
        ("full", "POST", f"{c}/colla/search", {"query": "x", "where": "no_such_column = 1"}),
        ("full", "POST", f"{c}/nowhere/similar", {"doc_id": doc}),
        ("full", "POST", f"{c}/colla/similar", {"doc_id": "0123456789abcdef"}),
        ("full", "GET", f"{c}/nowhere/documents/{doc}", None),
        ("full", "GET", f"{c}/colla/documents/0123456789abcdef", None),
        ("full", "GET", f"{c}/collc/documents/{doc}/pages/99", None),
        ("full", "GET", f"{c}/nowhere/documents/{doc}/file", None),
        ("full", "GET", f"{c}/colla/documents/0123456789abcdef/file", None),
        ("full", "POST", f"{c}/nowhere/index-jobs", {}),
        ("full", "POST", f"{c}/colla/index-jobs", {"folder": "../.."}),
        ("full", "POST", f"{c}/colla/index-jobs", {"folder": "/etc"}),
        ("full", "POST", f"{c}/colla/index-jobs", {"folder": "no-such-folder"}),
        ("scoped", "POST", f"{c}/collc/index-jobs", {"folder": "b"}),
        ("scoped", "POST", f"{c}/newc/index-jobs", {"folder": "."}),
        ("full", "GET", f"{V1}/index-jobs/0123456789ab", None),
        ("full", "GET", f"{V1}/no/such/route", None),
    ]


def test_no_error_names_a_server_path_or_a_collection_the_key_cannot_see(site: Site) -> None:
    from docsearch.config import data_home

    secret_words = [site.db, str(site.root), str(site.base), str(data_home()), "/tmp"]
    for role, method, path, body in _refusals(site):
        reply = site.as_(role).call(method, path, body)
        assert 400 <= reply.status < 500, (path, reply.status, reply.body[:300])
        message = reply.json()["error"]
        assert not any(word in message for word in secret_words), (path, message)
        for other in ("colla", "collb", "collc"):  # none but the one asked for
            if other not in path:
                assert other not in message, (path, message)


# ---------------------------------------------------------------------------------------------
# Methods and bodies


def test_a_method_a_route_lacks_is_405_with_allow(site: Site) -> None:
    client = site.as_("full")
    cases = [("DELETE", f"{V1}/collections/colla/search", "POST")]
    cases += [("PUT", f"{V1}/collections/colla", "GET"), ("POST", f"{V1}/health", "GET")]
    cases += [("PATCH", f"{V1}/index-jobs/0123456789ab", "GET")]
    for method, path, allowed in cases:
        reply = client.call(method, path)
        expect_error(reply, 405)
        assert allowed in reply.headers["allow"].split(", "), (path, reply.headers)


def _chunked_post(site: Site, path: str, parts: int, part: bytes) -> Reply:
    connection = http.client.HTTPConnection(site.client.host, site.client.port, timeout=60)
    headers = {"Authorization": f"Bearer {site.keys['full']}", "Content-Type": "application/json"}
    try:
        connection.request("POST", path, body=iter([part] * parts), headers=headers)
        response = connection.getresponse()
        return Reply(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


def test_a_chunked_body_over_the_limit_is_413(site: Site) -> None:
    path = f"{V1}/collections/colla/search"
    assert "body over" in expect_error(_chunked_post(site, path, 300, b"x" * 1024), 413)
    small = _chunked_post(site, path, 1, b'{"query": "alpha"}')  # a chunked body within it
    assert small.status == 200 and small.json()["hits"]


# ---------------------------------------------------------------------------------------------
# DOCSEARCH_ENCODER=none


def test_encoder_none_makes_a_lexical_collection_from_an_api_job(site: Site) -> None:
    client = site.as_("scoped")
    (site.root / "fresh").mkdir()
    (site.root / "fresh" / "f.md").write_text("# Fresh\n\nFoxtrot figs ripen late.\n")
    started = client.post(f"{V1}/collections/newc/index-jobs", {"folder": "fresh"})
    assert started.status == 202, started.body
    job = finished(client, started.json()["url"])
    assert job["state"] == "done", job
    info = client.get(f"{V1}/collections/newc").json()
    assert info["encoder_spec"] is None and info["chunks"] == 1
    hits = client.post(f"{V1}/collections/newc/search", {"query": "foxtrot figs"}).json()
    assert hits["mode"] == "lexical" and hits["hits"][0]["title"] == "Fresh"


def test_encoder_none_makes_a_lexical_collection_from_the_cli(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "memo.md").write_text("# Memo\n\nParking permits are renewed.\n")
    from docsearch.config import Settings
    from docsearch.retriever import Retriever

    env = {"DOCSEARCH_DB": str(tmp_path / "db"), "DOCSEARCH_ENCODER": "none"}
    made = run_cli("index", str(tmp_path / "docs"), env=env)
    assert made.returncode == 0, made.stderr
    retriever = Retriever("docs", settings=Settings(db=str(tmp_path / "db")))
    assert retriever.store.meta.encoder is None and not retriever.store.has_vectors
    assert retriever.search("parking permits", k=1)[0].title == "Memo"


# ---------------------------------------------------------------------------------------------
# A hit as the schema describes it, and as a user reads its score


def test_the_schema_describes_a_hit_with_its_passages_and_scores(site: Site) -> None:
    schema = site.as_(None).get("/openapi.json").json()
    models = schema["components"]["schemas"]

    def resolved(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = models[node["$ref"].rsplit("/", 1)[-1]]
        return node

    for route, extra in (("search", set()), ("similar", {"terms", "pairs", "query_passage"})):
        post = schema["paths"][f"{V1}/collections/{{name}}/{route}"]["post"]
        answer = resolved(post["responses"]["200"]["content"]["application/json"]["schema"])
        assert answer["properties"]["mode"]["type"] == "string"
        hit = resolved(answer["properties"]["hits"]["items"])
        fields = hit["properties"]
        assert {"path", "title", "doc_id", "score", "scores", "passages", *extra} <= set(fields)
        assert fields["score"]["type"] == "number"
        per_leg = fields["scores"]["additionalProperties"]  # leg -> {"rank": .., "score": ..}
        assert per_leg["additionalProperties"]["type"] == "number"
        passage = resolved(fields["passages"]["items"])
        assert {"score", "snippet", "pages", "page", "chunk_id"} <= set(passage["properties"])


def test_a_lone_hit_shows_a_score_a_user_can_read(site: Site) -> None:
    """A collection of one document answers with one hit: its score is its legs' weights (no
    leg can tell one document from others), never the "0.0000" a z-score of one would be; in
    the API, the CLI and the UI alike."""
    from docsearch.app.web.actions import score_line
    from docsearch.retriever import Retriever

    answer = site.as_("full").post(f"{V1}/collections/colla/search", {"query": "alpha apples"})
    (hit,) = answer.json()["hits"]
    assert hit["score"] > 0.5 and hit["scores"]["fused"]["score"] == hit["score"]
    shown = run_cli(
        "search", "alpha apples", "--collection", "colla", env={"DOCSEARCH_DB": site.db}
    )
    assert shown.returncode == 0, shown.stderr
    assert f"score {hit['score']:.4f}" in shown.stdout and "score 0.0000" not in shown.stdout
    (found,) = Retriever("colla", db=site.db).search("alpha apples")
    assert score_line(found).startswith(f"score {hit['score']:.4f}")


# ---------------------------------------------------------------------------------------------
# The OpenAPI schema, checked by schemathesis


def _schemathesis(site: Site, key: str | None) -> subprocess.CompletedProcess[str]:
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli, "schemathesis is in the test extra: pip install -e '.[test]'"
    config = REPO / "schemathesis.toml"  # which 400s no schema can state
    argv = [cli, "--config-file", str(config), "run"]
    argv += [f"http://{site.client.host}:{site.client.port}/openapi.json"]
    argv += ["--checks", "all", "--max-examples", "25", "--no-color", "--workers", "1"]
    argv += ["-H", f"Authorization: Bearer {key}"] if key else []
    # Run in the test's folder: schemathesis leaves its cache in the working folder.
    return subprocess.run(argv, cwd=site.base, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # three schemathesis runs: about a minute on two cores
@pytest.mark.parametrize("role", ["full", "scoped", None])
def test_the_server_matches_its_openapi_schema(site: Site, role: str | None) -> None:
    run = _schemathesis(site, site.keys[role] if role else None)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "passed" in run.stdout and "failure" not in run.stdout.split("SUMMARY")[-1]
