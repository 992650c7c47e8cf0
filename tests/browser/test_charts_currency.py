"""Charts in the reader's currency, in Chromium (review leftover of issue 28): on a server with the operator's BRL
rate and BRL as the default, the /tco charts as drawn show reais on their money axis (tick labels and title), in
English and in Portuguese, like the tables beside them; no tick says "$" alone or "US$".

Its own server (the session's has no BRL rate): the same uvicorn command as ``conftest.live_server``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from browser.conftest import ROOT, LiveServer, Traffic, _route, find_free_port, wait_for_server

TCO = ("/tco?server=nvidia-dgx-h100&nodes=2&model=llama-3.1-8b&training.method=lora"
       "&training.train_tokens=100000000&hardware.server=nvidia-dgx-h100")


@pytest.fixture(scope="module")
def brl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    workdir = tmp_path_factory.mktemp("brl-server")
    port = find_free_port()
    env = {**os.environ, "CAPPLAN_DATABASE_URL": f"sqlite:///{workdir / 'capplan.db'}",
           "CAPPLAN_RATE_LIMIT_ANONYMOUS": "10000/minute", "PYTHONUNBUFFERED": "1",
           "CAPPLAN_CURRENCY": "BRL", "CAPPLAN_BRL_PER_USD": "5.43", "CAPPLAN_BRL_RATE_DATE": "2026-12-01",
           "CAPPLAN_BRL_RATE_SOURCE": "Banco Central do Brasil PTAX"}
    env.pop("DATABASE_URL", None)
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
                                    "--host", "127.0.0.1", "--port", str(port)],
                                   cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_for_server(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.mark.parametrize(("lang", "symbol"), [("en", "R$"), ("pt_BR", "R$\u00a0")])
def test_tco_charts_are_drawn_in_reais(browser, brl_server: LiveServer, lang: str, symbol: str) -> None:  # type: ignore[no-untyped-def]
    traffic = Traffic()
    context = browser.new_context(base_url=brl_server.url, viewport={"width": 1400, "height": 1000})
    context.route("**/*", _route(traffic))
    context.add_cookies([{"name": "capplan_lang", "value": lang, "url": brl_server.url}])
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: traffic.errors.append(str(exc)))
        page.goto(TCO)
        cost = page.locator("#job-runs td.cost").first.inner_text()
        assert cost.startswith("R$"), cost  # the table, in reais
        for chart in ("tco", "runs"):
            page.wait_for_selector(f"#chart-{chart} .main-svg")
            texts = page.locator(f"#chart-{chart} .ytick text").evaluate_all("els => els.map(e => e.textContent)")
            ticks = [t.strip() for t in texts if t and t.strip()]
            assert ticks, chart
            assert all(t.replace(" ", "\u00a0").startswith(symbol) for t in ticks), (chart, ticks)
            assert not any("US$" in t for t in ticks), (chart, ticks)
            title = str(page.locator(f"#chart-{chart} .ytitle").text_content())
            assert "BRL" in title and "USD" not in title, (chart, title)
    finally:
        context.close()
    assert traffic.foreign == [] and traffic.errors == [], (traffic.foreign, traffic.errors)
