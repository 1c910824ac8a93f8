"""The live UI server serves files only through docsearch's guarded route.

A real `docsearch ui` runs on 127.0.0.1 with its working directory holding gradio's examples
cache (`.gradio/cached_examples/`) and with `GRADIO_TEMP_DIR` inherited from the environment,
both with files planted in them. Gradio's own file routes would hand those out; every spelling
of them is refused here, as is gradio's upload route (the UI offers no upload), while the page,
its assets and the guarded route keep working. Requests go out byte for byte (http.client), so
encoded, doubled and dotted spellings reach the server unnormalised.
"""

from __future__ import annotations

import http.client
import os
import re
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from tests.ui.browser import ui_server
from tests.ui.corpus import SECRET, build_corpus, index_corpus

CACHED = "CACHED EXAMPLE planted by the test 1111"
INHERITED = "INHERITED TEMP FILE planted by the test 2222"
MARKERS = (CACHED, INHERITED, SECRET, "root:x:")


@dataclass
class Site:
    host: str
    port: int
    workdir: Path  # the server's working directory
    planted: list[Path]  # files gradio would serve
    inherited: Path  # GRADIO_TEMP_DIR as the server found it
    indexed_pdf: str


def _plant(base: Path) -> tuple[Path, Path, list[Path]]:
    workdir, inherited = base / "work", base / "inherited-gradio-tmp"
    cached = workdir / ".gradio" / "cached_examples" / "17" / "output 0" / "answer.txt"
    cached.parent.mkdir(parents=True)
    cached.write_text(CACHED)
    (inherited / "3f2a").mkdir(parents=True)
    top, nested = inherited / "notes.txt", inherited / "3f2a" / "report.html"
    top.write_text(INHERITED)
    nested.write_text(f"<p>{INHERITED}</p>")
    return workdir, inherited, [cached, top, nested]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("routes")
    corpus = build_corpus(base / "corpus")
    index_corpus(corpus)
    workdir, inherited, planted = _plant(base)
    env = {"GRADIO_TEMP_DIR": str(inherited)}
    with ui_server(corpus.db, "--collection", "docs", cwd=workdir, env=env) as url:
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        yield Site(
            parts.hostname, parts.port, workdir, planted, inherited, corpus.doc("policy.pdf")
        )


def _request(site: Site, target: str, method: str = "GET", body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:  # fmt: skip
    """Send `target` exactly as written (no client-side normalisation)."""
    connection = http.client.HTTPConnection(site.host, site.port, timeout=30)
    try:
        connection.putrequest(method, target, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body or b"")))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _percent_all(text: str) -> str:
    return "".join(f"%{byte:02X}" for byte in text.encode())


def _spellings(site: Site, path: Path) -> list[str]:
    """Ways to name `path` after a file route: absolute, relative, dotted, doubled, encoded."""
    absolute = str(path)
    spelled = [
        absolute,
        f"/{absolute}",
        f"{path.parent}/x/../{path.name}",
        f"{path.parent}/./{path.name}",
        absolute.replace("/", "//"),
        quote(absolute),
        quote(absolute, safe=""),
        _percent_all(absolute),
        quote(quote(absolute, safe=""), safe=""),
        f"file://{absolute}",
    ]
    if path.is_relative_to(site.workdir):
        relative = path.relative_to(site.workdir).as_posix()
        spelled += [relative, f"./{relative}", quote(relative, safe=""), f"x/../{relative}"]
    return [s.replace(" ", "%20") for s in spelled]


ROUTES = [
    "/gradio_api/file=",
    "/file=",
    "/gradio_api/file/",
    "/file/",
    "//gradio_api/file=",
    "/gradio_api//file=",
    "/./gradio_api/file=",
    "/docsearch/../gradio_api/file=",
    "/gradio_api/./file=",
    "/gradio_api/file%3D",
    "/gradio_api/file%3d",
    "/gradio_api%2Ffile=",
    "/%67radio_api/file=",
    "/gradio%5Fapi/file=",
    "/GRADIO_API/file=",
    "/gradio_api/FILE=",
    "/gradio_api/file=/..",  # followed by the absolute path: "/gradio_api/file=/../abs"
]


def test_planted_files_exist_and_gradio_would_find_them(site: Site) -> None:
    for path in site.planted:
        assert path.is_file(), path  # the probe below is meaningful only if they are there


def test_gradio_file_routes_refuse_every_spelling(site: Site) -> None:
    served = []
    for path in site.planted:
        for route in ROUTES:
            for spelled in _spellings(site, path):
                for method in ("GET", "HEAD"):
                    status, body = _request(site, route + spelled, method)
                    leaked = any(m.encode() in body for m in MARKERS)
                    if status not in (403, 404) or leaked:
                        served.append((method, route + spelled, status))
    assert not served, f"{len(served)} requests not refused, e.g. {served[:5]}"


def test_indexed_documents_are_not_served_by_gradio_either(site: Site) -> None:
    for route in ROUTES[:4]:
        status, body = _request(site, route + site.indexed_pdf)
        assert status in (403, 404) and not body.startswith(b"%PDF"), route


def _multipart(name: str, data: bytes) -> tuple[bytes, dict[str, str]]:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


@pytest.mark.parametrize(
    "route",
    ["/gradio_api/upload", "/upload", "//gradio_api/upload", "/gradio_api/upload?upload_id=x1",
     "/gradio_api/upload/", "/gradio_api/process_recording", "/gradio%5Fapi/upload"],
)  # fmt: skip
def test_uploads_are_refused(site: Site, route: str) -> None:
    body, headers = _multipart("dropped.txt", b"x" * 1_000_000)
    status, answer = _request(site, route, "POST", body, headers)
    assert 400 <= status < 500, (route, status, answer[:200])
    assert b"dropped" not in answer
    assert not list(site.inherited.rglob("dropped*")) and not list(site.workdir.rglob("dropped*"))


def test_the_ui_still_loads_and_the_guarded_route_serves(site: Site) -> None:
    status, page = _request(site, "/")
    assert status == 200 and b"<html" in page.lower()
    assert _request(site, "/config")[0] == 200
    assets = re.findall(rb'(?:src|href)="[^"]*?(/(?:assets|static)/[^"?#]+)"', page)
    assert assets, "the page links no gradio assets"
    for asset in assets[:5]:
        assert _request(site, asset.decode())[0] == 200, asset
    status, pdf = _request(site, "/docsearch/file?" + "collection=docs&path=" + quote(site.indexed_pdf, safe=""))  # fmt: skip
    assert status == 200 and pdf == Path(site.indexed_pdf).read_bytes()


def test_the_ui_keeps_its_files_in_a_fresh_private_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docsearch.app.web.ui import use_private_gradio_folders

    inherited = tmp_path / "shared-tmp"
    inherited.mkdir()
    (inherited / "someone-elses.txt").write_text(INHERITED)
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(inherited))
    monkeypatch.delenv("GRADIO_EXAMPLES_CACHE", raising=False)
    use_private_gradio_folders()
    private = Path(os.environ["GRADIO_TEMP_DIR"])
    assert private.resolve() != inherited.resolve()
    assert not private.resolve().is_relative_to(inherited.resolve())
    assert not (private / "someone-elses.txt").exists()
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    cache = Path(os.environ["GRADIO_EXAMPLES_CACHE"])
    assert cache.is_absolute() and cache.resolve().is_relative_to(private.resolve())


@pytest.mark.parametrize(
    "target",
    [
        "/gradio_api/deep_link?session_hash=x",  # writes into gradio's temp folder
        "/gradio_api/upload_progress?upload_id=x",
        "/gradio_api/info",
        "/gradio_api/proxy=https://example.org/x",
        "/gradio_api/run-history/records",
        "/gradio_api/stream/s/r/1/playlist-file",
        "/svelte/../../etc/passwd",
        "/static/../../../../etc/passwd",
        "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/assets//etc/passwd",
        "/monitoring",
        "/openapi.json",
    ],
)
def test_other_gradio_routes_are_closed(site: Site, target: str) -> None:
    status, body = _request(site, target)
    assert status == 404, (target, status)
    assert not any(m.encode() in body for m in MARKERS)


def test_the_route_list_admits_only_canonical_ui_paths() -> None:
    from docsearch.app.web.ui import is_ui_route

    for path in ("/", "/config", "/assets/index-DphvyggB.js", "/static/fonts/a/b.woff2",
                 "/gradio_api/queue/join", "/gradio_api/heartbeat/6zqs8kuni13", "/docsearch/file"):  # fmt: skip
        assert is_ui_route(path), path
    for path in ("", "//", "/gradio_api/file=/etc/passwd", "/gradio_api/upload", "/file=/x",
                 "/assets/../x", "/static/./x", "/assets//x", "/assets/", "/gradio_api/heartbeat/",
                 "/gradio_api/heartbeat/a/b", "/docsearch/file/", "//docsearch/file", "/x/../"):  # fmt: skip
        assert not is_ui_route(path), path
