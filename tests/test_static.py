"""Vendored JavaScript: versioned filenames tied to the installed packages, and nothing from a CDN."""

from __future__ import annotations

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


def test_plotly_bundle_matches_the_installed_plotly() -> None:
    version = get_plotlyjs_version()
    path = STATIC / PLOTLY_JS
    assert path.name == f"plotly-{version}.min.js"
    assert path.is_file(), f"run: cp $(python -c 'import plotly,os;print(os.path.dirname(plotly.__file__))')" \
                           f"/package_data/plotly.min.js {path}"
    header = path.read_text(encoding="utf-8", errors="replace")[:400]
    assert re.search(rf"plotly\.js v{re.escape(version)}\b", header), header


def test_the_vendored_plotly_is_the_installed_packages_bundle_byte_for_byte() -> None:
    """pyproject pins plotly to the release whose plotly.js is vendored; a different install fails here."""
    import plotly

    bundled = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    assert (STATIC / PLOTLY_JS).read_bytes() == bundled.read_bytes()


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
