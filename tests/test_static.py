"""Vendored JavaScript: versioned filenames tied to the installed packages, and nothing from a CDN."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs_version

from app.web.templating import HTMX_JS, HTMX_VERSION, PLOTLY_JS, TEMPLATE_DIR

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "static"

#: src/href of script, link and img tags, and url(...) in CSS
_ASSET = re.compile(r"""<(?:script|link|img|iframe|source)\b[^>]*?\b(?:src|href)\s*=\s*["']?([^"'\s>]+)""", re.I)
_CSS_URL = re.compile(r"""url\(\s*["']?([^"')]+)""", re.I)
_EXTERNAL = re.compile(r"^(?:https?:)?//", re.I)


def external_assets(text: str) -> list[str]:
    """Asset URLs in an HTML or CSS text that point at another host."""
    urls = _ASSET.findall(text) + _CSS_URL.findall(text)
    return [u for u in urls if _EXTERNAL.match(u) and not re.match(r"^(?:https?:)?//(127\.0\.0\.1|localhost)\b", u)]


def _lock() -> dict[str, str]:
    return dict(json.loads((STATIC / "vendor" / "plotly-basic.lock.json").read_text(encoding="utf-8")))


def test_plotly_bundle_is_the_basic_bundle_of_the_installed_plotly() -> None:
    """The vendored plotly.js is the same release as the installed plotly package's (pyproject pins it)."""
    version = get_plotlyjs_version()
    path = STATIC / PLOTLY_JS
    assert path.name == f"plotly-basic-{version}.min.js"
    assert path.is_file(), "run: scripts/vendor-plotly"
    header = path.read_text(encoding="utf-8", errors="replace")[:400]
    assert re.search(rf"plotly\.js \(basic - minified\) v{re.escape(version)}\b", header), header
    lock = _lock()
    assert (lock["package"], lock["version"], lock["file"]) == ("plotly.js-basic-dist-min", version, path.name)


def test_the_vendored_plotly_is_the_npm_packages_file_byte_for_byte() -> None:
    """scripts/vendor-plotly checked the npm tarball against the registry's sha1 and sha512 integrity and recorded
    the file's sha256; an edited or re-minified bundle fails here."""
    lock = _lock()
    assert re.fullmatch(r"[0-9a-f]{40}", lock["npm_shasum"]) and lock["npm_integrity"].startswith("sha512-")
    assert hashlib.sha256((STATIC / PLOTLY_JS).read_bytes()).hexdigest() == lock["sha256"]


def _bundle_traces() -> set[str]:
    text = (STATIC / PLOTLY_JS).read_text(encoding="utf-8", errors="replace")
    return set(re.findall(r'moduleType:"trace",name:"([a-z0-9]+)"', text))


def test_the_basic_bundle_has_every_trace_type_the_charts_use() -> None:
    """The partial bundle registers scatter, bar and pie only: a chart module that builds any other trace type
    (``go.Heatmap``, ``go.Waterfall``...) needs the full bundle, and fails here first."""
    used = set()
    for path in (ROOT / "app" / "charts").glob("*.py"):
        used |= {name.lower() for name in re.findall(r"\bgo\.([A-Z][A-Za-z]+)\(", path.read_text(encoding="utf-8"))}
    used -= {"figure"}
    assert used, "the scan found no trace constructors"
    assert used <= _bundle_traces(), used - _bundle_traces()
    assert {"bar", "scatter"} <= _bundle_traces()


def test_redoc_bundle_names_no_cdn() -> None:
    """scripts/vendor-docs-assets points ReDoc's sidebar logo (an <img> from Redocly's CDN) at an inline SVG."""
    text = (STATIC / "vendor" / "redoc-2.5.4" / "redoc.standalone.js").read_text(encoding="utf-8")
    assert "cdn.redoc.ly" not in text
    assert 'alt:"redocly logo"' in text


def test_pyproject_pins_the_plotly_that_is_installed() -> None:
    from importlib.metadata import version

    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'"plotly=={version("plotly")}"' in pyproject


def test_htmx_bundle_carries_its_version() -> None:
    path = STATIC / HTMX_JS
    assert path.name == f"htmx-{HTMX_VERSION}.min.js"
    assert f'version:"{HTMX_VERSION}"' in path.read_text(encoding="utf-8")


def test_only_the_referenced_vendor_bundles_are_shipped() -> None:
    names = {p.name for p in (STATIC / "vendor").glob("*.js")}
    ours = {n for n in names if n.startswith(("plotly-", "htmx-"))}
    assert ours == {Path(PLOTLY_JS).name, Path(HTMX_JS).name}


@pytest.mark.parametrize("path", sorted(TEMPLATE_DIR.rglob("*.html")), ids=lambda p: p.name)
def test_templates_load_nothing_from_other_hosts(path: Path) -> None:
    assert external_assets(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", sorted((STATIC / "css").glob("*.css")), ids=lambda p: p.name)
def test_css_loads_nothing_from_other_hosts(path: Path) -> None:
    assert external_assets(path.read_text(encoding="utf-8")) == []


def test_the_scanner_finds_cdn_references() -> None:
    html = '<script src="https://cdn.plot.ly/plotly-2.js"></script><link href="//fonts.example/x.css" rel=stylesheet>'
    assert external_assets(html) == ["https://cdn.plot.ly/plotly-2.js", "//fonts.example/x.css"]
    assert external_assets('<script src="/static/vendor/htmx.js"></script><a href="https://x.org">x</a>') == []
    assert external_assets("body { background: url('https://x.org/a.png') }") == ["https://x.org/a.png"]
