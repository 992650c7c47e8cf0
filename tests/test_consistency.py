"""One truth per number (issue 28), the cross-page consistency suite: for one job, the API and every page that
shows a figure of it show the same value.

Jobs: :data:`JOBS` (fixed: models from 1B to 70B, full / LoRA / QLoRA, GPUs and servers, one and several nodes,
layouts that fit and that do not) and :func:`test_random_jobs_read_the_same_everywhere` (Hypothesis, derandomised:
the same examples on every run), 36 + 20 = 56 jobs. Server-rendered pages are parsed as HTML here;
``tests/browser/test_consistency_browser.py`` reads a subset of them in Chromium.

Figures covered, and where each is shown (:data:`COVERED`, listed in docs/consistency.md):

- per-GPU memory (the busiest GPU's peak, GiB): API ``memory.total_bytes``; estimate ``#kpi-total``; /compare the
  option's "your layout" row; the quote (print view and PDF) "Per-GPU memory"; the suggested layout card
  ``#layout-mem`` = the estimate it opens
- fits, at risk or not: API ``memory.fits`` and ``memory.fit_verdict``; estimate ``#verdict``; /compare's verdict;
  the quote "Fits"
- time to train: API ``train.time_to_train_s``; estimate ``#kpi-ttt``; /compare; /plan's "Your layout" row; the
  quote "Time to train"; the suggested layout card ``#layout-ttt`` = the estimate it opens
- cost to train (USD, to the cent): API ``cost.total_usd``; estimate ``#kpi-cost``; /compare's cost cell; /plan's
  "Your layout" row; the quote "Cost to train"; /tco's per-run "own" row (owned servers); the suggested layout card
  ``#layout-cost`` = the estimate it opens
- throughput (tokens/s): API ``time.tokens_per_s``; estimate ``#kpi-tps``; /compare's tokens/s
- global batch (sequences): API ``layout`` (micro-batch x accumulation x dp); estimate ``#global-batch`` and the
  form's ``#form-global-batch``; /plan's "Your layout" batch; the suggested layout's ``#layout-batch``
- power per node (peak / at load / average) and nodes per rack: estimate node panel and /tco (owned servers)
- FAQ "70B from scratch": per-GPU memory without and with offload = the API's for the requests it links
- the default rack budget (the catalog's one ``rack_kw``, 40.8 kW) and the nodes per rack it gives: the estimate
  API's ``host.nodes_per_rack``, the node panel, /tco without a job, the TCO and cluster APIs and the quote
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.settings import Settings
from app.main import create_app
from app.web.forms import parse_form
from app.web.templating import duration, gib, money, si

SAME_ORIGIN = {"Origin": "http://testserver"}

#: figure -> where the suite reads it (the closing note of issue 28 lists these)
COVERED: dict[str, tuple[str, ...]] = {
    "per-GPU memory": ("API", "estimate", "compare (your layout)", "quote print", "quote PDF", "suggested layout",
                       "FAQ"),
    "fits": ("API", "estimate", "compare", "quote print"),
    "time to train": ("API", "estimate", "compare", "planner (your layout)", "quote print", "suggested layout"),
    "cost to train": ("API", "estimate", "compare", "planner (your layout)", "quote print", "TCO per run",
                      "suggested layout"),
    "tokens/s": ("API", "estimate", "compare"),
    "global batch": ("API", "estimate", "estimate form", "planner (your layout)", "suggested layout"),
    "power peak / at load / average": ("estimate node panel", "TCO"),
    "nodes per rack": ("estimate node panel", "TCO"),
    "default rack budget": ("estimate API", "estimate node panel", "TCO page", "TCO API", "cluster API",
                            "quote print"),
}


def _job(model: str, method: str = "lora", gpu: str | None = None, server: str | None = None, nodes: int = 1,
         **extra: Any) -> str:
    pairs: list[tuple[str, str]] = [("model", model), ("training.method", method),
                                    ("training.train_tokens", str(extra.pop("tokens", 100_000_000)))]
    if server:
        pairs.append(("hardware.server", server))
    if gpu:
        pairs.append(("hardware.gpu", gpu))
    if nodes > 1:
        pairs.append(("hardware.num_nodes", str(nodes)))
    pairs += [(k.replace("__", "."), str(v)) for k, v in extra.items()]
    return urlencode(pairs)


CK = {"training__activation_checkpointing": "full"}
Z3 = {"parallelism__sharding": "zero3", **CK}
JOBS = [
    _job("llama-3.2-1b", "full", gpu="a100-sxm4-80gb", hardware__gpus_per_node=1),
    _job("llama-3.2-1b", "lora", gpu="h100-sxm5-80gb", hardware__gpus_per_node=1),
    _job("llama-3.2-3b", "full", gpu="l40s-48gb", hardware__gpus_per_node=1, **CK),
    _job("llama-3.2-3b", "qlora", gpu="a100-pcie-40gb", hardware__gpus_per_node=1),
    _job("llama-3.1-8b", "full", gpu="h100-sxm5-80gb", **Z3),
    _job("llama-3.1-8b", "lora", gpu="a100-sxm4-80gb"),
    _job("llama-3.1-8b", "qlora", gpu="l40s-48gb", hardware__gpus_per_node=4),
    _job("llama-3.1-8b", "full", server="nvidia-dgx-h100", **Z3),
    _job("llama-3.1-8b", "lora", server="dell-xe9680-a100", training__micro_batch_size=2,
         training__gradient_accumulation_steps=4),
    _job("llama-3.1-8b", "full", gpu="h200-sxm-141gb"),
    _job("mistral-7b", "lora", server="hpe-cray-xd670-h100", **CK),
    _job("mistral-7b", "full", gpu="a100-sxm4-40gb", **Z3),
    _job("qwen2.5-7b", "qlora", gpu="h100-pcie-80gb", hardware__gpus_per_node=2),
    _job("qwen2.5-14b", "lora", server="dell-xe9680-h200", **CK),
    _job("qwen2.5-14b", "full", gpu="h100-sxm5-80gb", nodes=2, **Z3),
    _job("gemma-2-9b", "lora", gpu="a100-sxm4-80gb", **CK),
    _job("gemma-2-27b", "lora", server="nvidia-dgx-a100-640gb", **Z3),
    _job("qwen2.5-32b", "qlora", gpu="h100-sxm5-80gb"),
    _job("qwen2.5-32b", "full", server="nvidia-dgx-h200", **Z3),
    _job("llama-2-13b", "full", gpu="a100-sxm4-80gb", **Z3),
    _job("llama-2-7b", "lora", gpu="mi300x-192gb", hardware__gpus_per_node=8),
    _job("llama-3.1-70b", "lora", server="nvidia-dgx-a100-640gb", **Z3),
    _job("llama-3.1-70b", "lora", gpu="a100-sxm4-80gb"),  # does not fit as given
    _job("llama-3.1-70b", "full", server="dell-xe9680-h100"),  # does not fit as given (issue 28's own job)
    _job("llama-3.1-70b", "full", server="dell-xe9680-h100", parallelism__sharding="zero3",
         parallelism__offload="optimizer", parallelism__framework="deepspeed", **CK, tokens=1_000_000_000),
    _job("llama-3.1-70b", "full", gpu="h100-sxm5-80gb", nodes=2, **Z3),
    _job("llama-3.1-70b", "qlora", gpu="h100-sxm5-80gb", hardware__gpus_per_node=1),
    _job("llama-3.3-70b", "lora", server="nvidia-dgx-h100", **Z3),
    _job("llama-3.1-70b", "full", gpu="a100-sxm4-80gb", parallelism__sharding="zero3",
         parallelism__offload="optimizer+params", **CK),
    _job("qwen2.5-72b", "lora", server="nvidia-dgx-h200", **Z3),
    _job("mixtral-8x7b", "lora", server="nvidia-dgx-h100", **Z3),
    _job("mixtral-8x7b", "qlora", gpu="a100-sxm4-80gb", hardware__gpus_per_node=2),
    _job("llama-3.1-8b", "lora", server="dell-r760xa-l40s", hardware__gpus_per_node=4),
    _job("llama-3.1-8b", "full", server="nvidia-dgx-b200", **Z3),
    _job("llama-3.2-1b", "full", gpu="h100-sxm5-80gb", nodes=4),
    _job("llama-3.1-8b", "lora", gpu="h100-sxm5-80gb", training__seq_len=8192, **CK),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("consistency") / "consistency.db"
    settings_ = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                         rate_limit_web_writes="100000/minute", rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings_)) as client:
        yield client


# ------------------------------------------------------------------------------------------------- reading
def _tag(html: str, dom_id: str) -> str | None:
    match = re.search(rf'<[^>]*\bid="{dom_id}"[^>]*>', html)
    return match.group(0) if match else None


def _attr(html: str, dom_id: str, attr: str) -> str | None:
    tag = _tag(html, dom_id)
    found = re.search(rf'\b{attr}="([^"]*)"', tag) if tag else None
    return found.group(1) if found else None


def _text(html: str, dom_id: str) -> str | None:
    match = re.search(rf'\bid="{dom_id}"[^>]*>(.*?)</(?:dd|span|p|td|strong|div)>', html, re.S)
    if not match:
        return None
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", match.group(1)))).strip()


def _cell_text(cell: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", cell))).strip()


@dataclass
class Truth:
    """The API's figures for one job, formatted as the pages format them."""

    query: str
    request: Any
    fits: bool
    memory: str
    ttt: str | None
    cost_usd: str | None  # "%.2f"
    tps: str | None
    batch: int
    world: int
    server: str | None
    verdict: str = "fits"  # the API's memory.fit_verdict: fits / at_risk / does_not_fit


def _truth(client: TestClient, query: str) -> Truth:
    form = parse_form(dict(parse_qsl(query, keep_blank_values=True)))
    assert form.request is not None, (query, form.errors.messages)
    req = form.request
    r = client.post("/api/v1/estimates", content=req.model_dump_json(exclude_unset=True),
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    api = r.json()
    mem, train, time, cost = api["memory"], api.get("train"), api.get("time"), api.get("cost")
    fits = bool(mem["fits"])
    total = (cost or {}).get("total_usd") if fits else None
    return Truth(query=query, request=req, fits=fits, memory=gib(mem["total_bytes"]),
                 ttt=duration(train["time_to_train_s"]) if train and fits else None,
                 cost_usd=f"{total:.2f}" if total is not None else None,
                 tps=si(time["tokens_per_s"], "tok/s") if time and fits else None,
                 batch=req.training.micro_batch_size * req.training.gradient_accumulation_steps
                 * api["layout"]["dp"],
                 world=int(api["layout"]["world_size"]), server=req.hardware.server,
                 verdict=str(mem["fit_verdict"]))


# ------------------------------------------------------------------------------------------------- checks
def check_estimate(client: TestClient, t: Truth) -> str:
    page = client.get(f"/estimate?{t.query}").text
    assert (_text(page, "kpi-total") or "").startswith(t.memory), ("estimate memory", t.query)
    verdict = _text(page, "verdict") or ""
    assert (verdict != "Does not fit") == t.fits, ("estimate verdict", verdict, t.query)
    assert (verdict == "At risk") == (t.verdict == "at_risk"), ("estimate at-risk verdict", verdict, t.query)
    assert (_text(page, "kpi-ttt") if t.fits else None) == t.ttt, ("estimate time to train", t.query)
    assert _attr(page, "kpi-cost", "data-usd") == t.cost_usd, ("estimate cost", t.query)
    if t.tps is not None:
        assert _text(page, "kpi-tps") == t.tps, ("estimate tokens/s", t.query)
    assert (_text(page, "global-batch") or "").startswith(f"{t.batch:,} sequences"), ("estimate batch", t.query)
    assert f"Global batch: {t.batch:,} sequences" in unescape(page), ("estimate form batch", t.query)
    return page


def check_compare(client: TestClient, t: Truth) -> None:
    option = f"servers={t.server}" if t.server else f"gpus={t.request.hardware.gpu}"
    html = client.get(f"/compare?{t.query}&{option}").text
    row = re.search(r'<tr data-option="[^"]+" data-layout="yours".*?</tr>', html, re.S)
    assert row, ("compare row", t.query)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
    mem = _cell_text(cells[1])
    assert mem == t.memory, ("compare memory", mem, t.memory, t.query)
    assert ("Does not fit" not in _cell_text(cells[0])) == t.fits, ("compare verdict", t.query)
    assert ("At risk" in _cell_text(cells[0])) == (t.verdict == "at_risk"), ("compare at-risk verdict", t.query)
    assert _cell_text(cells[5]).replace(" ", "") == (t.tps.removesuffix("tok/s").replace(" ", "")
                                                     if t.tps else "–"), ("compare tokens/s", t.query)
    assert _cell_text(cells[7]) == (t.ttt or "–"), ("compare time to train", t.query)
    usd = re.search(r'class="num cost"\s*(?:data-usd="([\d.]+)")?', row.group(0))
    assert usd and usd.group(1) == t.cost_usd, ("compare cost", t.query)


def check_planner(client: TestClient, t: Truth, page: str) -> None:
    url = re.search(r'id="compare-link"', page) and None
    del url
    from app.web.layout_suggestion import plan_url_for

    html = client.get(plan_url_for(t.request)).text
    row = re.search(r'<tr id="pve-estimate">.*?</tr>', html, re.S)
    if row is None:  # the planner found no plan for this job: nothing to compare the estimate with
        assert "plan-vs-estimate" not in html
        return
    cells = [_cell_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)]
    assert cells[1] == f"{t.batch:,} seq", ("planner batch", cells[1], t.query)
    assert cells[3] == (t.ttt or "–"), ("planner time to train", cells[3], t.query)
    usd = re.search(r'class="num cost"(?: data-usd="([\d.]+)")?', row.group(0))
    assert usd and usd.group(1) == t.cost_usd, ("planner cost", t.query)


def check_suggestion(client: TestClient, t: Truth) -> None:
    card = client.get(f"/estimate/layout?{t.query}").text
    if 'id="layout-batch"' in card:
        assert f"Global batch: {t.batch:,} sequences" in unescape(card), ("suggestion batch", t.query)
    use = re.search(r'id="use-layout" href="([^"]+)"', card)
    if use is None:
        return
    opened = client.get(unescape(use.group(1))).text
    chosen = parse_form(dict(parse_qsl(urlsplit(unescape(use.group(1))).query))).request
    assert chosen is not None and chosen.hardware == t.request.hardware and chosen.cost == t.request.cost
    assert chosen.model == t.request.model and chosen.training.method == t.request.training.method
    mem = (_text(card, "layout-mem") or "").split(" per GPU")[0]
    assert (_text(opened, "kpi-total") or "").startswith(mem), ("suggestion memory", t.query)
    if _text(card, "layout-ttt"):
        assert (_text(card, "layout-ttt") or "").removesuffix(" to train") == _text(opened, "kpi-ttt")
    assert _attr(card, "layout-cost", "data-usd") == _attr(opened, "kpi-cost", "data-usd"), ("suggestion cost",)


def check_tco(client: TestClient, t: Truth, page: str) -> None:
    if not t.server or t.request.hardware.num_nodes != 1:
        return
    tco = client.get(f"/tco?server={t.server}&{t.query}").text
    for est, own in (("node-power-peak", "tco-power-peak"), ("node-power-load", "tco-power-load"),
                     ("node-power-avg", "tco-power-avg")):
        if _text(page, est) is not None:
            assert _text(page, est) == _text(tco, own), (est, t.query)
    rack = (_text(page, "node-rack") or "").split(" node")[0]
    if rack:
        assert (_text(tco, "kpi-rack-nodes") or "").split(" ")[0] == rack, ("rack", t.query)
    if t.cost_usd is not None and _attr(page, "kpi-cost", "data-basis") == "own":
        runs = re.search(r'id="job-runs".*?</table>', tco, re.S)
        assert runs, ("tco per run", t.query)
        own = re.search(r'<tr data-kind="own">.*?data-usd="([\d.]+)"', runs.group(0), re.S)
        assert own and own.group(1) == t.cost_usd, ("tco owned per run", own and own.group(1), t.cost_usd, t.query)


def check_quote(client: TestClient, t: Truth, pdf: bool = False) -> None:
    saved = client.post("/quotes", data={"query": t.query, "name": "consistency", "customer": "ACME",
                                         "price": "1000"}, headers=SAME_ORIGIN, follow_redirects=False)
    assert saved.status_code == 303, saved.text[:500]
    qid = urlsplit(saved.headers["location"]).path.rstrip("/").split("/")[-1]
    html = unescape(client.get(f"/api/v1/quotes/{qid}/print").text)
    lines = dict((_cell_text(a), _cell_text(b)) for a, b in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>",
                                                                        html, re.S))
    assert lines["Per-GPU memory"].startswith(t.memory), ("quote memory", lines["Per-GPU memory"], t.query)
    expected = {"fits": "yes", "at_risk": "at risk", "does_not_fit": "no"}[t.verdict]
    assert lines["Fits"].startswith(expected), ("quote fits", lines["Fits"], t.query)
    if t.ttt is not None:
        assert lines["Time to train"].startswith(t.ttt + " "), ("quote time", lines["Time to train"], t.query)
    if t.cost_usd is not None:
        shown = lines["Cost to train"].split(" ")[0]
        assert shown == money(float(t.cost_usd)), ("quote cost", shown, t.cost_usd, t.query)
    assert "docs/" not in html, "nothing internal on a customer document"
    if pdf and shutil.which("pdftotext"):
        body = client.get(f"/api/v1/quotes/{qid}.pdf").content
        text = subprocess.run(["pdftotext", "-layout", "-", "-"], input=body, capture_output=True,
                              check=True).stdout.decode()
        assert t.memory in text, ("pdf memory", t.query)
        if t.ttt is not None:
            assert t.ttt in text, ("pdf time", t.query)


def check_job(client: TestClient, query: str, deep: bool) -> None:
    t = _truth(client, query)
    page = check_estimate(client, t)
    check_compare(client, t)
    check_quote(client, t, pdf=deep)
    if deep:
        check_planner(client, t, page)
        if t.world > 1:
            check_suggestion(client, t)
        check_tco(client, t, page)


# -------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("index", range(len(JOBS)))
def test_fixed_jobs_read_the_same_everywhere(client: TestClient, index: int) -> None:
    # every third job also through the planner, the suggested layout, /tco and the PDF (the slow pages)
    check_job(client, JOBS[index], deep=index % 3 == 0 or "xe9680-h100" in JOBS[index])


MODELS = ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "llama-3.1-70b")
GPUS = ("a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "l40s-48gb")
SERVERS = ("nvidia-dgx-h100", "dell-xe9680-a100", "nvidia-dgx-h200", None, None)


@st.composite
def jobs(draw: st.DrawFn) -> str:
    extra: dict[str, Any] = {
        "training__micro_batch_size": draw(st.integers(1, 4)),
        "training__gradient_accumulation_steps": draw(st.sampled_from([1, 2, 8])),
        "training__activation_checkpointing": draw(st.sampled_from(["none", "full"])),
        "parallelism__sharding": draw(st.sampled_from(["none", "zero2", "zero3"])),
        "training__seq_len": draw(st.sampled_from([1024, 2048, 4096])),
    }
    server = draw(st.sampled_from(SERVERS))
    gpu = None if server else draw(st.sampled_from(GPUS))
    if gpu:
        extra["hardware__gpus_per_node"] = draw(st.sampled_from([1, 2, 8]))
    return _job(draw(st.sampled_from(MODELS)), draw(st.sampled_from(["full", "lora", "qlora"])), gpu=gpu,
                server=server, nodes=draw(st.integers(1, 2)), tokens=draw(st.sampled_from([10**8, 10**9])),
                **extra)


RANDOM_JOBS = 20


@settings(max_examples=RANDOM_JOBS, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(query=jobs())
def test_random_jobs_read_the_same_everywhere(client: TestClient, query: str) -> None:
    check_job(client, query, deep=False)


def test_faq_from_scratch_figures_are_the_apis(client: TestClient) -> None:
    page = unescape(client.get("/faq").text)
    section = page[page.index('id="faq-scratch"'):]
    section = section[:section.index("</section>")]
    links = re.findall(r'href="(/estimate\?[^"]+)"', section)
    assert len(links) >= 2
    for url, marker in ((links[0], "Without offload"), (links[1], "With parameters and optimizer offloaded")):
        t = _truth(client, urlsplit(url).query)
        fact = section[section.index(marker):]
        fact = _cell_text(fact[:fact.index("</dd>")] if "</dd>" in fact else fact[:400])
        assert t.memory in fact, (marker, t.memory, fact)
        check_estimate(client, t)


def test_the_suite_covers_at_least_fifty_jobs() -> None:
    assert len(JOBS) + RANDOM_JOBS >= 50
    assert len(set(JOBS)) == len(JOBS)


@pytest.mark.parametrize("server", ["hpe-dl380a-gen11-l40s", "hpe-dl380-gen11-l40s", "nvidia-dgx-b200"])
def test_one_rack_geometry_everywhere(client: TestClient, server: str) -> None:
    """One rack geometry: 42U less the units kept for switches and PDUs (host_defaults.yaml ``rack_units`` and
    ``rack_units_reserved``, read by ``default_rack_units``) in the host sizing and in the rack plan of the pages
    and the TCO; a 4U or 2U node, limited by space, reads the same nodes per rack in the estimate API, its node
    panel, /tco and the TCO API."""
    from estimator.facility.rack import default_rack_kw, default_rack_units
    from hardware_catalog import load_catalog

    catalog = load_catalog()
    units, reserved = default_rack_units()
    spec = catalog.servers[server]
    peak = float(spec.max_power_kw) if spec.max_power_kw else None
    by_space = (units - reserved) // int(spec.rack_units)
    query = _job("llama-3.1-8b", "lora", server=server, hardware__gpus_per_node=int(spec.gpu_count))
    req = parse_form(dict(parse_qsl(query))).request
    assert req is not None
    api = client.post("/api/v1/estimates", content=req.model_dump_json(exclude_unset=True),
                      headers={"Content-Type": "application/json"}).json()
    shown = api["host"]["nodes_per_rack"]
    assert shown <= by_space and (peak is None or shown <= default_rack_kw() // peak), (shown, by_space)
    page = unescape(client.get(f"/estimate?{query}").text)
    assert (_text(page, "node-rack") or "").startswith(f"{shown} node"), ("node panel", _text(page, "node-rack"))
    tco = unescape(client.get(f"/tco?server={server}&nodes=1").text)
    assert (_text(tco, "kpi-rack-nodes") or "").split(" ")[0] == str(shown), ("/tco", _text(tco, "kpi-rack-nodes"))
    plan = client.post("/api/v1/tco", json={"server": server}).json()["rack"]["plan"]
    assert (plan["nodes_per_rack"], plan["nodes_by_space"]) == (shown, by_space), ("TCO API", plan)


def test_one_rack_budget_everywhere(client: TestClient) -> None:
    """One default rack budget: the catalog's ``rack_kw`` (tco_defaults.yaml, the one table that holds it) is the
    default of a request's ``host.rack_kw_budget``, of the TCO's ``rack_kw`` and of the cluster's racks; the
    estimate API, its node panel, /tco without a job, the TCO and cluster APIs and the quote plan the same rack at the
    same stated budget."""
    import yaml

    from estimator.facility.rack import default_rack_kw
    from estimator.host_options import HostInput, HostOptions
    from estimator.tco import TcoAssumptions
    from hardware_catalog import load_catalog

    catalog = load_catalog()
    kw = float(catalog.tco_defaults.value("rack_kw"))
    assert default_rack_kw() == kw == TcoAssumptions().rack_kw == HostInput().rack_kw_budget
    assert HostOptions().resolved().rack_kw_budget == kw
    # no second table carries a rack budget of its own
    import estimator

    host_yaml = yaml.safe_load((Path(estimator.__file__).parent / "data" / "host_defaults.yaml").read_text())
    assert not [k for k in host_yaml.get("power", {}) if "kw" in k], "the rack budget lives in tco_defaults.yaml"

    server = "nvidia-dgx-h100"
    by_power = int(kw // float(catalog.servers[server].max_power_kw))  # 4 DGX H100 (10.2 kW) in a 40.8 kW rack
    query = _job("llama-3.1-8b", "lora", server=server)
    req = parse_form(dict(parse_qsl(query))).request
    assert req is not None
    api = client.post("/api/v1/estimates", content=req.model_dump_json(exclude_unset=True),
                      headers={"Content-Type": "application/json"}).json()
    assert api["host"]["nodes_per_rack"] == by_power, ("estimate API", api["host"]["nodes_per_rack"], by_power)
    page = unescape(client.get(f"/estimate?{query}").text)
    assert (_text(page, "node-rack") or "").startswith(f"{by_power} nodes"), ("node panel", _text(page, "node-rack"))
    assert f"Per {kw:g} kW rack" in page, "the node panel names the budget"
    tco = unescape(client.get(f"/tco?server={server}&nodes=1").text)
    assert (_text(tco, "kpi-rack-nodes") or "").split(" ")[0] == str(by_power), ("/tco", _text(tco, "kpi-rack-nodes"))
    assert f"Nodes per {kw:g} kW rack" in tco, "/tco names the same budget"
    plan = client.post("/api/v1/tco", json={"server": server}).json()["rack"]["plan"]
    assert (plan["rack_kw"], plan["nodes_per_rack"]) == (kw, by_power), ("TCO API", plan)
    rack = client.post("/api/v1/clusters", json={"server": server, "num_nodes": 16}).json()["rack"]
    assert (rack["rack_kw"], rack["nodes_per_rack"]) == (kw, by_power), ("cluster API", rack)
    saved = client.post("/quotes", data={"query": query, "name": "rack", "customer": "ACME", "price": "1000"},
                        headers=SAME_ORIGIN, follow_redirects=False)
    qid = urlsplit(saved.headers["location"]).path.rstrip("/").split("/")[-1]
    html = unescape(client.get(f"/api/v1/quotes/{qid}/print").text)
    lines = dict((_cell_text(a), _cell_text(b)) for a, b in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>",
                                                                        html, re.S))
    assert lines.get(f"Per {kw:g} kW rack", "").startswith(f"{by_power} nodes"), ("quote", lines)
    # in pt-BR the budget is written with the locale's decimal mark wherever it is named
    pt_kw = f"{kw:g}".replace(".", ",")
    assert f" {pt_kw} kW" in unescape(client.get(f"/api/v1/quotes/{qid}/print?lang=pt_BR").text)
    client.cookies.set("capplan_lang", "pt_BR")
    try:
        for url in (f"/estimate?{query}", f"/tco?server={server}&nodes=1", "/faq"):
            shown = unescape(client.get(url).text)
            assert f" {pt_kw} kW" in shown and f" {kw:g} kW" not in shown, url
    finally:
        client.cookies.delete("capplan_lang")
