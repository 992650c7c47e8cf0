"""Issue 15, finding 9: every page works under the Content-Security-Policy (scripts from this origin only,
a nonce for Swagger UI's set-up script): no CSP violation reported, no console error, and the charts (plotly
with its figure JSON in data blocks), the htmx swaps, Swagger UI and ReDoc render."""

from __future__ import annotations

import re
from typing import Any

import pytest

#: records every violation the browser reports (runs before any page script; not subject to the page's CSP)
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sourceFile || '') + ':' + e.lineNumber);
});
"""

JOB = "model=llama-3.2-1b&hardware.gpu=h100-sxm5-80gb&training.seq_len=2048"


def _watch(page: Any) -> list[str]:
    console: list[str] = []
    page.add_init_script(RECORD_VIOLATIONS)
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    return console


def _check(page: Any, console: list[str]) -> None:
    violations = page.evaluate("window.__csp")
    assert violations == [], violations
    csp = [m for m in console if "Content Security Policy" in m or "Content-Security-Policy" in m]
    assert csp == [], csp
    errors = [m for m in console if m.startswith("error:")]
    assert errors == [], errors


def _charts_drawn(page: Any) -> int:
    """Every chart box on the page has its plotly SVG; returns how many."""
    boxes = page.locator(".chart[data-figure]")
    count = int(boxes.count())
    for i in range(count):
        boxes.nth(i).locator(".main-svg").first.wait_for()
    return count


@pytest.mark.parametrize(("path", "min_charts"), [
    ("/", 0),
    (f"/estimate?{JOB}", 1),
    ("/compare?" + JOB.replace("&hardware.gpu=h100-sxm5-80gb", ""), 1),
    (f"/plan?{JOB}", 1),
    ("/tco", 1),
    ("/catalog", 0),
    ("/catalog/gpus/h100-sxm5-80gb", 0),
    ("/quotes", 0),
])
def test_pages_work_under_the_csp(page: Any, path: str, min_charts: int) -> None:
    console = _watch(page)
    response = page.goto(path)
    assert response.status == 200
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    page.wait_for_load_state("networkidle")
    assert _charts_drawn(page) >= min_charts
    _check(page, console)


def test_htmx_swaps_draw_their_charts_under_the_csp(page: Any) -> None:
    console = _watch(page)
    page.goto("/")
    page.get_by_role("button", name="Estimate").click()
    page.wait_for_selector("#result #chart-memory .main-svg")
    page.goto(f"/compare?{JOB}")
    page.wait_for_load_state("networkidle")
    _charts_drawn(page)
    _check(page, console)


def test_a_saved_quote_page_works_under_the_csp(page: Any, live_server: Any) -> None:
    console = _watch(page)
    saved = page.request.post("/quotes", form={"query": JOB, "name": "csp check", "customer": "Acme", "price": "1"},
                              headers={"Origin": live_server.url}, max_redirects=0)
    assert saved.status == 303, saved.text()
    location = saved.headers["location"]
    assert re.match(r"^(http://[^/]+)?/quotes/\d+", location)
    response = page.goto(location)
    assert response.status == 200
    page.wait_for_load_state("networkidle")
    assert _charts_drawn(page) >= 1
    _check(page, console)
    printable = page.goto(location.rstrip("/") + "/print")
    if printable is not None and printable.status == 200:
        page.wait_for_load_state("networkidle")
        _check(page, console)


def test_swagger_ui_works_under_the_csp(page: Any) -> None:
    console = _watch(page)
    response = page.goto("/api/v1/docs")
    assert re.search(r"script-src 'self' 'nonce-[^']+'", response.headers["content-security-policy"])
    page.wait_for_selector(".swagger-ui .opblock-tag", timeout=30_000)
    page.locator(".opblock-summary-path", has_text="/api/v1/estimates").first.click()
    page.wait_for_selector(".opblock-body")
    _check(page, console)


def test_redoc_works_under_the_csp(page: Any) -> None:
    console = _watch(page)
    page.goto("/api/v1/redoc")
    page.locator("h2", has_text="Estimate memory, speed and cost of one training setup").wait_for(timeout=30_000)
    assert page.locator("h1").first.inner_text().startswith("capplan")
    page.wait_for_load_state("networkidle")
    _check(page, console)


def test_an_injected_inline_script_is_blocked_and_seen(page: Any) -> None:
    """The check above can fail: a stored-script stand-in (an inline script without the nonce) does not run,
    and the browser reports it."""
    _watch(page)
    page.goto("/catalog")
    ran = page.evaluate("""() => { window.__ran = false; const s = document.createElement('script');
        s.textContent = 'window.__ran = true'; document.body.appendChild(s); return window.__ran; }""")
    assert ran is False
    for _ in range(50):  # polled from here: wait_for_function's predicate would itself be an eval the CSP refuses
        if page.evaluate("window.__csp.length"):
            break
        page.wait_for_timeout(100)
    assert page.evaluate("window.__csp")[0].startswith("script-src")
