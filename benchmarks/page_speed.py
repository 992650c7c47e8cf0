"""Page timings in a real browser: first paint of ``/estimate`` (and other chart pages) on a cold and a warm cache.

    PYTHONPATH=. .venv/bin/python benchmarks/page_speed.py --runs 5 [--json out.json] [--root OTHER_CHECKOUT]
        [--lang pt-BR]

``--root`` serves another checkout of the app (an older commit, say, from ``git archive``) with this script,
so a before/after comparison runs under the same machine load (run them alternately on a shared machine).
``--lang`` sends that ``Accept-Language`` (``pt-BR``: the pages and the estimator's messages in Portuguese).

The app runs under uvicorn in a subprocess on a free loopback port (throwaway SQLite); Debian's chromium
(``/usr/bin/chromium``, as in the browser tests) is driven by Playwright. Every cold run is a fresh browser
context (empty HTTP cache); the warm run reloads the same URL in that context. Per page and run it reads the
browser's own timings: ``first-contentful-paint`` (Paint Timing), ``domContentLoadedEventEnd`` and
``loadEventEnd`` (Navigation Timing), the time until the first plotly chart has drawn its SVG, and the bytes
that crossed the wire (``transferSize`` of the navigation and every resource) — medians of ``--runs``.
Loopback only: nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.load_test import HOST, free_port  # noqa: E402

CHROMIUM = os.environ.get("CAPPLAN_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
PAGES = {
    "estimate": "/estimate?model=llama-3.1-70b&training.method=lora&hardware.server=dell-xe9680-h100"
                "&parallelism.sharding=zero3&training.activation_checkpointing=full",
    "home": "/",
    "compare": "/compare?model=llama-3.1-70b&training.method=lora&training.activation_checkpointing=full"
               "&parallelism.sharding=zero3",
}
_TIMINGS = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  const res = performance.getEntriesByType('resource');
  return {fcp_ms: fcp ? fcp.startTime : null, dcl_ms: nav.domContentLoadedEventEnd, load_ms: nav.loadEventEnd,
          bytes: nav.transferSize + res.reduce((a, r) => a + r.transferSize, 0),
          chart_ms: window.__chartAt || null};
}"""
_CHART_WATCH = """() => {
  const seen = () => { if (!window.__chartAt && document.querySelector('.js-plotly-plot .main-svg'))
    window.__chartAt = performance.now(); };
  new MutationObserver(seen).observe(document, {subtree: true, childList: true});
}"""


def start_server(port: int, workdir: Path, root: Path = ROOT) -> Any:
    env = {**os.environ, "CAPPLAN_DATABASE_URL": f"sqlite:///{workdir / 'pages.db'}",
           "CAPPLAN_RATE_LIMIT_ANONYMOUS": "10000000/minute", "CAPPLAN_RATE_LIMIT_WEB_PAGES": "10000000/minute",
           "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host", HOST,
               "--port", str(port), "--log-level", "warning", "--no-access-log"]
    log = (workdir / "server.log").open("wb")
    return subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait_ready(url: str, proc: Any, timeout: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise SystemExit("server not ready")


def _measure(page: Any, url: str, has_chart: bool) -> dict[str, Any]:
    page.goto(url, wait_until="load")
    if has_chart:
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
    page.wait_for_timeout(50)
    return dict(page.evaluate(_TIMINGS))


def run(runs: int, root: Path = ROOT, lang: str = "en") -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start_server(port, Path(tmp), root)
        base = f"http://{HOST}:{port}"
        try:
            _wait_ready(base, proc)
            out: dict[str, Any] = {}
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                # one throwaway visit so the server's own first-request costs (imports, catalog) are not counted
                headers = {"Accept-Language": lang}
                warmup = browser.new_context(extra_http_headers=headers)
                warmup.new_page().goto(base + PAGES["estimate"])
                warmup.close()
                for name, path in PAGES.items():
                    has_chart = name != "home"
                    cold, warm = [], []
                    for _ in range(runs):
                        context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                                      extra_http_headers=headers)
                        context.add_init_script(f"({_CHART_WATCH})()")
                        page = context.new_page()
                        cold.append(_measure(page, base + path, has_chart))
                        warm.append(_measure(page, base + path, has_chart))
                        context.close()
                    out[name] = {"cold": _medians(cold), "warm": _medians(warm)}
                browser.close()
            return out
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _medians(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = rows[0].keys()
    return {k: (round(statistics.median(v), 1) if (v := [r[k] for r in rows if r[k] is not None]) else None)
            for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to serve (default: this one)")
    parser.add_argument("--lang", default="en", help="the Accept-Language of every visit (en, pt-BR)")
    args = parser.parse_args()
    result = run(args.runs, args.root.resolve(), args.lang)
    print(f"{'page':<9} {'cache':<5} {'FCP ms':>8} {'DCL ms':>8} {'load ms':>8} {'chart ms':>9} {'bytes':>10}")
    for name, by_cache in result.items():
        for cache, m in by_cache.items():
            print(f"{name:<9} {cache:<5} {m['fcp_ms'] or 0:>8.0f} {m['dcl_ms'] or 0:>8.0f} {m['load_ms'] or 0:>8.0f} "
                  f"{m['chart_ms'] or 0:>9.0f} {m['bytes'] or 0:>10,.0f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
