"""Charts show money as the tables do (issue 28's one truth, review leftover): with the operator's BRL rate and a
reader in reais, every money chart (TCO stack, own-vs-rent cumulative, cost per run vs time, upgrade payback,
/compare's cost bars, the planner's time-vs-cost) plots the converted amounts, hovers and labels them with the
tables' ``money`` (Babel, the reader's locale) and titles its axis with the currency, never "USD" or "$".

Server-side: the pages' figure JSON (``<script type="application/json" id="fig-...">``) is read and checked against
the tables of the same page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest
from babel.numbers import get_currency_symbol
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.formatting import parse_number
from app.main import create_app

RATE = 5.43
JOB = ("model=llama-3.1-8b&training.method=lora&training.train_tokens=100000000&hardware.server=nvidia-dgx-h100")
TCO = f"/tco?server=nvidia-dgx-h100&nodes=2&up.current=nvidia-dgx-a100-640gb&up.candidate=nvidia-dgx-h100&{JOB}"
COMPARE = f"/compare?{JOB}&servers=nvidia-dgx-h100&servers=dell-xe9680-h100"
PLAN = ("/plan?model=llama-3.1-8b&training.method=lora&training.train_tokens=1e9&objective=time"
        "&constraints.gpus=h100-sxm5-80gb&constraints.gpus=a100-sxm4-80gb&constraints.max_nodes=1")
LOCALES = {"en": "en", "pt_BR": "pt_BR"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("brl-charts") / "brl.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_writes="100000/minute", rate_limit_web_pages="100000/minute",
                        currency="BRL", brl_per_usd=RATE, brl_rate_date="2026-12-01",
                        brl_rate_source="Banco Central do Brasil PTAX")
    with TestClient(create_app(settings)) as client:
        yield client


def _figures(html: str) -> dict[str, dict[str, Any]]:
    return {m.group(1): json.loads(m.group(2)) for m in
            re.finditer(r'<script type="application/json" id="fig-([\w-]+)">(.*?)</script>', html, re.S)}


def _cells(row: str) -> list[str]:
    return [re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", c))).strip()
            for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]


def _amount(label: str, locale: str) -> float:
    """The number of a money label as the tables write it ("R$ 7.183", "R$7,183.00")."""
    return float(parse_number(re.sub(r"[^\d.,-]", "", label), locale=locale))


def _assert_money_chart(fig: dict[str, Any], locale: str, axis: str = "yaxis") -> list[tuple[float, str]]:
    """No USD anywhere on the chart; its money axis in reais; every money point labelled as the tables write
    money, and plotted at that amount. Returns (plotted value, label) of every labelled point."""
    text = json.dumps(fig, ensure_ascii=False)
    assert "USD" not in text and "US$" not in text and "$%{" not in text, "a money chart left in USD"
    symbol = str(get_currency_symbol("BRL", locale=locale))
    layout_axis = fig["layout"][axis]
    assert "BRL" in layout_axis["title"]["text"], layout_axis["title"]
    assert layout_axis["tickprefix"].strip() == symbol
    points: list[tuple[float, str]] = []
    value_key = "y" if axis == "yaxis" else "x"
    for trace in fig["data"]:
        labels = trace.get("hovertext") if "hovertext" in trace else trace.get("customdata")
        if trace.get("type") == "bar" and axis == "xaxis":
            labels = trace.get("text")
        if not labels or not all(isinstance(v, str) for v in labels):
            continue
        for value, label in zip(trace[value_key], labels, strict=True):
            assert label.startswith(symbol), label
            shown = _amount(label, locale)
            assert abs(float(value) - shown) <= (0.5 if abs(shown) >= 100 else 0.005), (value, label)
            points.append((float(value), label))
    return points


@pytest.mark.parametrize("lang", ["en", "pt_BR"])
def test_tco_charts_plot_and_label_the_tables_money(client: TestClient, lang: str) -> None:
    client.cookies.set("capplan_lang", lang)
    html = client.get(TCO).text
    figs = _figures(html)
    assert {"tco", "cumulative", "runs", "upgrade"} <= set(figs), sorted(figs)
    stacked = _assert_money_chart(figs["tco"], lang)
    assert stacked, "the stacked bars carry the tables' money labels"
    for name in ("cumulative", "upgrade"):
        assert _assert_money_chart(figs[name], lang), name
    # cost per run vs time: each point is the runs table's row, the same label and the same money
    points = _assert_money_chart(figs["runs"], lang)
    rows = [_cells(r) for r in re.findall(r"<tr>.*?</tr>", html[html.index('id="runs-table"'):].split("</table>")[0],
                                          re.S)][1:]
    shown = {(trace_text, label) for t in figs["runs"]["data"]
             for trace_text, label in zip(t["text"], t["customdata"], strict=True)}
    assert {(r[0], r[2]) for r in rows} == shown and len(points) == len(rows)
    # the owned per-run cost: the table's USD (data-usd) at the operator's rate is what the chart plots
    own = re.search(r'<tr data-kind="own">.*?data-usd="([\d.]+)"[^>]*>([^<]+)', html, re.S)
    assert own is not None
    assert own.group(2).strip().startswith(str(get_currency_symbol("BRL", locale=lang)))
    # the money columns are headed in the currency they show ("R$ per GPU-hour", not "$ per GPU-hour")
    page = unescape(html)
    assert not re.search(r"(?<![R\w])\$ (?:per|por)\b", page) and "US$" not in page, "a money heading left in USD"
    assert f"{get_currency_symbol('BRL', locale=lang)} {'per' if lang == 'en' else 'por'} GPU" in page


def test_the_saved_quotes_serving_card_shows_the_serve_pages_money(client: TestClient) -> None:
    """The saved quote's serving card and the Serve page: the same money3, in reais."""
    client.cookies.set("capplan_lang", "en")
    serve = "model=llama-3.1-8b&server=dell-xe9680-h200&input_tokens=2048&output_tokens=512"
    saved = client.post("/quotes", data={"query": JOB, "serve_query": serve, "name": "x", "customer": "ACME",
                                         "price": "10"}, headers={"Origin": "http://testserver"},
                        follow_redirects=False)
    assert saved.status_code == 303, saved.text[:500]
    detail = unescape(client.get(saved.headers["location"]).text)
    served = unescape(client.get(f"/serve?{serve}").text)
    card = re.search(r'id="serving-usd-out">([^<]+)<', detail)
    page = re.search(r'id="usd-out">([^<]+)<', served)
    assert card and page and card.group(1) == page.group(1) and card.group(1).startswith("R$"), (card, page)
    assert "R$ per million output tokens" in detail and "R$ per million output tokens" in served


@pytest.mark.parametrize("lang", ["en", "pt_BR"])
def test_compare_cost_bars_are_the_cost_cells(client: TestClient, lang: str) -> None:
    client.cookies.set("capplan_lang", lang)
    html = client.get(COMPARE).text
    fig = _figures(html)["cmp-cost"]
    _assert_money_chart(fig, lang, axis="xaxis")
    bar = fig["data"][0]
    cells = re.findall(r'class="num cost"\s*data-usd="([\d.]+)"[^>]*>\s*<span[^>]*>([^<]+)</span>', html)
    assert cells
    for usd, label in cells:
        assert unescape(label) in bar["text"], (label, bar["text"])
        i = bar["text"].index(unescape(label))
        assert bar["x"][i] == pytest.approx(float(usd) * RATE, abs=0.01 * RATE), (usd, bar["x"][i])


def test_the_planner_chart_plots_the_winners_cost_in_reais(client: TestClient) -> None:
    client.cookies.set("capplan_lang", "en")
    html = client.get(PLAN).text
    fig = _figures(html)["plan"]
    _assert_money_chart(fig, "en")
    star = next(t for t in fig["data"] if list(t["customdata"]) == [1] and t["marker"]["symbol"] == "star")
    kpi = re.search(r'id="kpi-cost" data-usd="([\d.]+)"[^>]*>([^<]+)', html)
    assert kpi is not None
    assert star["y"][0] == pytest.approx(float(kpi.group(1)) * RATE, abs=0.01 * RATE)
    assert star["hovertext"][0] == unescape(kpi.group(2)).strip()


def test_in_dollars_the_same_charts_say_dollars(client: TestClient) -> None:
    """The reader's switch back to USD: the charts follow it (the same functions, not a BRL-only path)."""
    client.cookies.set("capplan_lang", "en")
    client.cookies.set("capplan_currency", "USD")
    try:
        fig = _figures(client.get(TCO).text)["tco"]
    finally:
        client.cookies.delete("capplan_currency")
    assert fig["layout"]["yaxis"]["title"]["text"] == "USD" and fig["layout"]["yaxis"]["tickprefix"] == "$"
    assert all(label.startswith("$") for t in fig["data"] for label in t["customdata"])
