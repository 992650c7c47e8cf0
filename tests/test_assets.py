"""Static files: content-hashed names with long-lived caching, plain names revalidated, gzip for text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app
from app.web.assets import IMMUTABLE, REVALIDATE, asset_url, digest_of, hashed_name
from app.web.templating import PLOTLY_JS

STATIC = Path(__file__).resolve().parents[1] / "static"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("assets") / "assets.db"
    with TestClient(create_app(Settings(database_url=f"sqlite:///{db}"))) as client:
        yield client


def test_hashed_names_carry_the_files_sha256() -> None:
    import hashlib

    digest = hashlib.sha256((STATIC / "css/app.css").read_bytes()).hexdigest()[:12]
    assert asset_url("css/app.css") == f"/static/css/app.{digest}.css"
    assert hashed_name("vendor/x-4.1.1.min.js", "0123456789ab") == "vendor/x-4.1.1.min.0123456789ab.js"
    assert asset_url("no/such/file.js") == "/static/no/such/file.js"


def test_pages_link_hashed_assets_served_immutable_and_gzipped(client: TestClient) -> None:
    page = client.get("/estimate?model=llama-3.2-1b").text
    links = re.findall(r'(?:src|href)="(/static/[^"]+)"', page)
    assert asset_url(PLOTLY_JS) in links and asset_url("css/app.css") in links
    for link in links:
        assert re.search(r"\.[0-9a-f]{12}\.[a-z]+$", link), link
        r = client.get(link, headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200, link
        assert r.headers["cache-control"] == IMMUTABLE
    r = client.get(asset_url(PLOTLY_JS), headers={"Accept-Encoding": "gzip, deflate"})
    assert r.headers["content-encoding"] == "gzip" and r.headers["vary"] == "Accept-Encoding"
    raw = (STATIC / PLOTLY_JS).read_bytes()
    assert r.content == raw  # httpx decodes; the body on the wire is smaller:
    assert int(r.headers["content-length"]) < len(raw) / 2


def test_plain_and_stale_names_are_served_with_revalidation(client: TestClient) -> None:
    plain = client.get("/static/css/app.css")
    assert plain.status_code == 200 and plain.headers["cache-control"] == REVALIDATE
    stale = client.get("/static/css/app.000000000000.css")
    assert stale.status_code == 200 and stale.headers["cache-control"] == REVALIDATE
    assert stale.content == plain.content
    assert client.get("/static/css/nope.000000000000.css").status_code == 404


def test_etag_of_the_gzipped_body_revalidates(client: TestClient) -> None:
    first = client.get("/static/css/app.css", headers={"Accept-Encoding": "gzip"})
    etag = first.headers["etag"]
    assert etag.endswith('-gzip"')
    again = client.get("/static/css/app.css", headers={"Accept-Encoding": "gzip", "If-None-Match": etag})
    assert again.status_code == 304


def test_brotli_when_accepted_smaller_than_gzip_and_revalidated(client: TestClient) -> None:
    from app.web.assets import _built

    raw = (STATIC / PLOTLY_JS).read_bytes()
    assert _built(STATIC / PLOTLY_JS) is not None, "scripts/precompress-static wrote the bundle's .br"
    br = client.get(asset_url(PLOTLY_JS), headers={"Accept-Encoding": "gzip, deflate, br"})
    gz = client.get(asset_url(PLOTLY_JS), headers={"Accept-Encoding": "gzip, deflate"})
    assert br.headers["content-encoding"] == "br" and br.content == raw  # httpx decodes brotli
    assert int(br.headers["content-length"]) < int(gz.headers["content-length"])
    small = client.get("/static/css/app.css", headers={"Accept-Encoding": "br;q=1, gzip;q=0.5"})
    assert small.headers["content-encoding"] == "br" and small.headers["etag"].endswith('-br"')
    again = client.get("/static/css/app.css", headers={"Accept-Encoding": "br", "If-None-Match": small.headers["etag"]})
    assert again.status_code == 304
    refused = client.get("/static/css/app.css", headers={"Accept-Encoding": "br;q=0, gzip"})
    assert refused.headers["content-encoding"] == "gzip"


def test_a_stale_build_time_brotli_file_is_not_served(tmp_path: Path) -> None:
    import brotli

    from app.web.assets import _built

    f = tmp_path / "big.js"
    f.write_text("var a = 1;" * 100)
    (tmp_path / "big.js.br").write_bytes(brotli.compress(b"var a = 2;"))
    assert _built(f) is None
    (tmp_path / "big.js.br").write_bytes(brotli.compress(f.read_bytes()))
    assert brotli.decompress(_built(f) or b"") == f.read_bytes()


def test_no_gzip_when_not_accepted_or_binary(client: TestClient) -> None:
    r = client.get("/static/css/app.css", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in r.headers
    png = client.get("/static/vendor/swagger-ui-5.35.0/favicon-32x32.png", headers={"Accept-Encoding": "gzip"})
    assert png.status_code == 200 and "content-encoding" not in png.headers


def test_digest_follows_the_file(tmp_path: Path) -> None:
    f = tmp_path / "a.js"
    f.write_text("one")
    first = digest_of(f)
    f.write_text("two!")
    assert digest_of(f) != first
