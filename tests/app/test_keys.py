"""Keys: `docsearch keys` prints a key once and stores its hash; when keys are in force; the
server bound beyond loopback refuses to start without one; an unkeyed loopback server also
serves the UI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.app.server import served
from tests.helpers import index_into, run_cli


def test_keys_create_prints_the_key_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    from docsearch.app.keys import KeyStore

    env = {"DOCSEARCH_KEYS": str(tmp_path / "keys.json")}
    made = run_cli("keys", "create", "--collections", "a,b", "--index", env=env)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    stored = (tmp_path / "keys.json").read_text()
    assert key.startswith("ds_") and len(key) > 40 and key not in stored
    assert (tmp_path / "keys.json").stat().st_mode & 0o077 == 0
    record = KeyStore(tmp_path / "keys.json").check(key)
    assert record is not None and record.collections == ("a", "b") and record.index
    assert KeyStore(tmp_path / "keys.json").check(key + "x") is None
    listed = run_cli("keys", "list", env=env)
    assert record.id in listed.stdout and key not in listed.stdout
    assert run_cli("keys", "revoke", record.id, env=env).returncode == 0
    assert json.loads(stored)[0]["id"] == record.id
    assert KeyStore(tmp_path / "keys.json").check(key) is None


@pytest.mark.parametrize("names", ["", " , ", "a,../b", "a b"])
def test_keys_create_refuses_bad_collection_lists(tmp_path: Path, names: str) -> None:
    env = {"DOCSEARCH_KEYS": str(tmp_path / "keys.json")}
    made = run_cli("keys", "create", "--collections", names, env=env)
    assert made.returncode == 2 and made.stderr.startswith("error: ")
    assert not (tmp_path / "keys.json").exists()


def test_serving_beyond_loopback_without_keys_is_refused(tmp_path: Path) -> None:
    env = {"DOCSEARCH_KEYS": str(tmp_path / "keys.json"), "DOCSEARCH_DB": str(tmp_path / "db")}
    refused = run_cli("serve", "--host", "0.0.0.0", "--port", "0", env=env)
    assert refused.returncode == 2
    assert "create a key first" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.slow  # gradio's start-up: about 10 s
def test_an_unkeyed_loopback_server_answers_without_a_key_and_serves_the_ui(
    tmp_path: Path,
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "memo.md").write_text("# Memo\n\nParking permits are renewed.\n")
    db = str(tmp_path / "db")
    index_into(db, tmp_path / "docs", "docs")
    env = {"DOCSEARCH_DB": db, "DOCSEARCH_KEYS": str(tmp_path / "keys.json")}
    with served(env) as client:
        reply = client.post("/api/v1/collections/docs/search", {"query": "parking"}, key=None)
        assert reply.json()["hits"][0]["title"] == "Memo"
        page = client.get("/", key=None)
        assert page.status == 200 and b"gradio" in page.body.lower()
        assert client.get("/gradio_api/info", key=None).status == 404  # the UI's allow-list


def test_the_docker_default_command_serves_beyond_loopback_only_with_a_key(
    tmp_path: Path,
) -> None:
    from tests.helpers import REPO

    cmd = next(
        line for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("CMD")
    )
    argv = json.loads(cmd.removeprefix("CMD"))
    assert argv[:3] == ["serve", "--host", "0.0.0.0"]
    env = {"DOCSEARCH_KEYS": str(tmp_path / "keys.json"), "DOCSEARCH_DB": str(tmp_path / "db")}
    refused = run_cli(*argv, env=env)
    assert refused.returncode == 2 and "create a key first" in refused.stderr


@pytest.mark.parametrize("content", ["{not json", '[{"id": 1}]', '{"a": 1}', "[1]"])
def test_a_damaged_key_file_is_a_usage_error(tmp_path: Path, content: str) -> None:
    from docsearch.app.keys import KeyStore
    from docsearch.errors import UsageError

    (tmp_path / "keys.json").write_text(content)
    with pytest.raises(UsageError, match="cannot read the key file"):
        KeyStore(tmp_path / "keys.json").check("ds_anything")
