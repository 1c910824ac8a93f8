"""Who may do what through a real `docsearch serve`: index jobs cannot widen what a key reads,
revoking the last key (or deleting the key file) never opens the API, and a request without a
key is refused before its body is read.

Three folders under the server's root, `a`, `b` and `c`, indexed as `colla`, `collb`, `collc`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.app.server import Client, expect_error, finished, served
from tests.helpers import index_into, run_cli

V1 = "/api/v1"
SECRETS = {
    "a": "alpha apples",
    "b": "bravo bananas, the secret of folder b",
    "c": "charlie cherries",
}


@dataclass
class Site:
    base: Path
    root: Path
    db: str
    env: dict[str, str]

    def key(self, *args: str) -> tuple[str, str]:
        """A key made by `docsearch keys create ARGS`, and its id."""
        made = run_cli("keys", "create", *args, env=self.env)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip(), made.stderr.split()[1].rstrip(":")


def make_site(base: Path) -> Site:
    root, db = base / "root", str(base / "db")
    for folder, text in SECRETS.items():
        (root / folder).mkdir(parents=True)
        (root / folder / f"{folder}.md").write_text(f"# Note {folder}\n\n{text}\n")
        index_into(db, root / folder, f"coll{folder}")
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_KEYS": str(base / "keys.json")}
    env |= {"DOCSEARCH_HOME": str(base / "home"), "DOCSEARCH_ENCODER": "hashing"}
    return Site(base, root, db, env)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return make_site(tmp_path_factory.mktemp("auth"))


@pytest.fixture(scope="module")
def server(site: Site) -> Iterator[Client]:
    with served(site.env, "--root", str(site.root), "--no-ui", log=site.base / "serve.log") as c:
        yield c
    log = (site.base / "serve.log").read_text()
    assert "Traceback" not in log, log


def _as(client: Client, key: str | None) -> Client:
    return Client(client.host, client.port, key)


def _search_paths(client: Client, name: str, query: str) -> list[str]:
    reply = client.post(f"{V1}/collections/{name}/search", {"query": query, "k": 50})
    assert reply.status == 200, reply.body
    return [hit["path"] for hit in reply.json()["hits"]]


# ---------------------------------------------------------------------------------------------
# Index jobs are bound to their collection's folder


def test_an_index_job_cannot_read_another_collections_folder_into_its_own(
    site: Site, server: Client
) -> None:
    key, _ = site.key("--collections", "collc", "--index")
    client = _as(server, key)
    refused = client.post(f"{V1}/collections/collc/index-jobs", {"folder": "b"})
    reason = expect_error(refused, 403)
    assert "bound to the folder it was created with" in reason and str(site.root) not in reason
    for query in ("bravo bananas secret", "charlie cherries"):
        paths = _search_paths(client, "collc", query)
        assert not any(p.startswith(str(site.root / "b")) for p in paths), paths
    # Its own folder (named, or by default) is still indexed on request.
    (site.root / "c" / "more.md").write_text("# More\n\nCherry orchards bloom in April.\n")
    for body in ({"folder": "c"}, None):
        started = client.post(f"{V1}/collections/collc/index-jobs", body)
        assert started.status == 202, started.body
        assert finished(client, started.json()["url"])["state"] == "done"
    assert str(site.root / "c" / "more.md") in _search_paths(client, "collc", "cherry orchards")


def test_a_scoped_key_cannot_make_a_collection_from_a_folder_it_may_not_read(
    site: Site, server: Client
) -> None:
    key, _ = site.key("--collections", "collc,newc", "--index")
    client = _as(server, key)
    for folder in ("b", ".", "b/."):  # b itself, or the root that holds it
        reply = client.post(f"{V1}/collections/newc/index-jobs", {"folder": folder})
        assert "cannot read" in expect_error(reply, 403)
    assert "no collection" in expect_error(client.get(f"{V1}/collections/newc"), 404)


def test_an_admin_key_may_bind_another_folder(site: Site, server: Client) -> None:
    admin, _ = site.key("--collections", "*", "--index")
    client = _as(server, admin)
    started = client.post(f"{V1}/collections/admin-made/index-jobs", {"folder": "a"})
    assert started.status == 202, started.body
    assert finished(client, started.json()["url"])["state"] == "done"
    started = client.post(f"{V1}/collections/admin-made/index-jobs", {"folder": "b"})
    assert started.status == 202, started.body
    assert finished(client, started.json()["url"])["state"] == "done"
    assert str(site.root / "b" / "b.md") in _search_paths(client, "admin-made", "bravo bananas")


# ---------------------------------------------------------------------------------------------
# The key comes first


def test_no_key_is_401_before_the_body_is_read(site: Site, server: Client) -> None:
    site.key("--collections", "colla")  # keys are in force from the first one made
    anyone = _as(server, None)
    for body in (b"{not json", b"\xff\xfe garbage", b"[1, 2]", {"surprise": 1}):
        reply = anyone.post(f"{V1}/collections/colla/search", body)
        assert "key" in expect_error(reply, 401)
        assert reply.headers["www-authenticate"] == "Bearer"
    expect_error(anyone.post(f"{V1}/collections/colla/index-jobs", b"{"), 401)
    expect_error(_as(server, "ds_wrong").post(f"{V1}/collections/colla/search", b"{"), 401)


# ---------------------------------------------------------------------------------------------
# Revocation


def _every_keyed_route(client: Client) -> list[tuple[str, str]]:
    """(method, concrete path) for every route of the schema but health, with sample ids."""
    schema = client.get("/openapi.json", key=None).json()
    sample = {"{name}": "colla", "{doc_id}": "0123456789abcdef", "{number}": "1"}
    sample["{job_id}"] = "0123456789ab"
    routes = []
    for template, methods in schema["paths"].items():
        if template.endswith("/health"):
            continue
        path = template
        for placeholder, value in sample.items():
            path = path.replace(placeholder, value)
        routes += [(method.upper(), path) for method in methods]
    assert len(routes) >= 10, routes
    return routes


def _all_refused(client: Client, key: str | None) -> None:
    for method, path in _every_keyed_route(client):
        body = {"query": "alpha"} if method == "POST" else None
        reply = client.call(method, path, body, key=key)
        assert reply.status == 401, (method, path, reply.status, reply.body[:200])


def test_revoking_the_last_key_or_deleting_the_file_never_opens_the_api(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    key, key_id = site.key("--collections", "colla")
    keys_file = Path(site.env["DOCSEARCH_KEYS"])
    with served(site.env, "--no-ui") as client:
        assert _as(client, key).get(f"{V1}/collections").status == 200
        assert run_cli("keys", "revoke", key_id, env=site.env).returncode == 0
        _all_refused(client, key)
        _all_refused(client, None)
        keys_file.unlink()  # a server started with keys keeps asking for them
        _all_refused(client, None)
        assert client.get(f"{V1}/health", key=None).status == 200
    with served(site.env, "--no-ui") as client:  # restarted without the key file
        _all_refused(client, None)
    with served(site.env, "--no-ui", "--no-keys") as client:  # open only when asked
        reply = client.post(f"{V1}/collections/collb/search", {"query": "bravo"}, key=None)
        assert reply.status == 200 and reply.json()["hits"]


def test_no_keys_serves_only_on_loopback(tmp_path: Path) -> None:
    env = {"DOCSEARCH_KEYS": str(tmp_path / "keys.json"), "DOCSEARCH_DB": str(tmp_path / "db")}
    refused = run_cli("serve", "--host", "0.0.0.0", "--port", "0", "--no-keys", env=env)
    assert refused.returncode == 2 and "loopback" in refused.stderr
