"""The web UI's embedded files as `flamewatch server` serves them: content
types, cache headers, gzip, ETag revalidation, no token needed for the page
while the API still wants one, and no way out of the embedded table."""

import gzip
import re

import pytest

from serverlib import Client, Procs, register_plugin
from test_server import start_server


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


@pytest.fixture(scope="module")
def ui(flamewatch, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    procs = Procs(tmp / "logs")
    _, port = start_server(procs, flamewatch, tmp / "data", extra=["--token", "t0k"])
    c = Client(port)
    yield c
    c.close()
    procs.close_all()


def test_index_is_served_without_token_and_revalidated(ui):
    r = ui.get("/", token=None)
    assert r.status == 200, r.describe()
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert r.headers["Cache-Control"] == "no-cache"
    assert "<title>flamewatch</title>" in r.text
    etag = r.headers["ETag"]
    again = ui.get("/", token=None, headers={"If-None-Match": etag})
    assert again.status == 304 and again.body == b"", again.describe()
    # The API behind it still needs the token.
    assert ui.get("/api/v1/labels", token=None).status == 401


def test_assets_have_types_hashed_names_and_gzip(ui):
    html = ui.get("/ui/", token=None).text
    names = re.findall(r'/ui/(app-[A-Z0-9]+\.(?:js|css))', html)
    assert sorted(n.rsplit(".", 1)[1] for n in names) == ["css", "js"], html
    for n in names:
        plain = ui.get(f"/ui/{n}", token=None)
        assert plain.status == 200, plain.describe()
        want = "text/javascript" if n.endswith(".js") else "text/css"
        assert plain.headers["Content-Type"].startswith(want)
        assert plain.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert "Content-Encoding" not in plain.headers
        z = ui.get(f"/ui/{n}", token=None, headers={"Accept-Encoding": "gzip, br"})
        assert z.headers.get("Content-Encoding") == "gzip"
        assert gzip.decompress(z.body) == plain.body
        assert len(z.body) < len(plain.body)
        no = ui.get(f"/ui/{n}", token=None, headers={"Accept-Encoding": "gzip;q=0"})
        assert "Content-Encoding" not in no.headers
    fav = ui.get("/favicon.ico", token=None)
    assert fav.status == 200 and fav.headers["Content-Type"] == "image/svg+xml"


@pytest.mark.parametrize("path,status", [
    ("/ui/../../etc/passwd", 400),
    ("/ui/%2e%2e/%2e%2e/etc/passwd", 400),
    ("/ui/..%2fetc%2fpasswd", 400),
    ("/ui/sub/index.html", 400),
    ("/ui/nope.js", 404),
    ("/ui/index.html.bak", 404),
])
def test_no_path_leaves_the_embedded_files(ui, path, status):
    r = ui.get(path, token=None)
    assert r.status == status, r.describe()
    assert r.json()["error"]
    assert b"root:" not in r.body


def test_ui_takes_only_get(ui):
    r = ui.request("POST", "/", body=b"x", token=None)
    assert r.status == 405, r.describe()
