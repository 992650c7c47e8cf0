"""One truth per number (issue 28): no button changes what the user chose, and one job's figures read the same
on the estimate, its suggested layout, the planner, /compare, the FAQ and the Serve page.

Each test here reproduces one bullet of the issue (it failed on the commit before the fix)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from html import unescape
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app
from app.web.forms import parse_form
from estimator import estimate

XE9680_H100 = "model=llama-3.1-70b&training.method=full&training.train_tokens=1e9&hardware.server=dell-xe9680-h100"
SCRATCH_A100 = ("model=llama-3.1-70b&training.activation_checkpointing=full&training.train_tokens=1411074129920"
                "&parallelism.sharding=zero3&hardware.gpu=a100-sxm4-80gb")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("truth") / "truth.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_writes="100000/minute", rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


def _href(html: str, dom_id: str) -> str | None:
    match = re.search(rf'id="{dom_id}" href="([^"]+)"|href="([^"]+)"[^>]*id="{dom_id}"', html)
    return unescape(match.group(1) or match.group(2)) if match else None


def _attr(html: str, dom_id: str, attr: str) -> str | None:
    match = re.search(rf'<[^>]*id="{dom_id}"[^>]*>', html)
    if not match:
        return None
    found = re.search(rf'{attr}="([^"]*)"', match.group(0))
    return found.group(1) if found else None


def _text(html: str, dom_id: str) -> str:
    match = re.search(rf'id="{dom_id}"[^>]*>(.*?)</(?:dd|span|p|td|strong)>', html, re.S)
    assert match, dom_id
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", match.group(1)))).strip()


def _request(url: str):  # type: ignore[no-untyped-def]
    req = parse_form(dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))).request
    assert req is not None, url
    return req


def test_use_this_layout_keeps_the_server_nodes_and_owned_cost_basis(client: TestClient) -> None:
    page = client.get(f"/estimate?{XE9680_H100}").text
    card = client.get(f"/estimate/layout?{XE9680_H100}").text
    url = _href(card, "use-layout")
    assert url is not None, "the 70B full fine-tune does not fit as given: a layout is suggested"
    chosen, mine = _request(url), _request(f"/estimate?{XE9680_H100}")
    assert chosen.hardware.server == "dell-xe9680-h100" and chosen.hardware.gpu == mine.hardware.gpu
    assert chosen.hardware.num_nodes == mine.hardware.num_nodes
    assert chosen.model == mine.model and chosen.training.method == mine.training.method
    assert (chosen.cost or mine.cost) is None or (chosen.cost == mine.cost), "the cost basis is the user's"
    assert "cost.basis=rent" not in url
    opened = client.get(url).text
    assert _attr(opened, "kpi-cost", "data-basis") == "own", "an owned server stays owned"
    assert _attr(card, "layout-cost", "data-usd") == _attr(opened, "kpi-cost", "data-usd")
    assert "kpi-cost" not in page or _attr(page, "kpi-cost", "data-basis") == "own"


def test_the_suggestion_box_shows_the_figures_of_the_estimate_it_opens(client: TestClient) -> None:
    for query in (XE9680_H100, SCRATCH_A100, "model=llama-3.1-70b&training.method=lora&hardware.gpu=a100-sxm4-80gb"):
        card = client.get(f"/estimate/layout?{query}").text
        url = _href(card, "use-layout")
        if url is None:
            assert "use-layout" not in card
            continue
        opened = client.get(url).text
        mem = _text(card, "layout-mem").split(" GiB")[0]
        assert _text(opened, "kpi-total").startswith(mem + " GiB"), query
        result = estimate(_request(url))
        assert result.memory.fits and result.memory.total_bytes <= result.memory.capacity_bytes, (
            "a layout the box says fits is within the card's memory")
        if "layout-ttt" in card:
            assert _text(card, "layout-ttt").removesuffix(" to train") == _text(opened, "kpi-ttt")


def test_a_plan_on_other_hardware_is_only_a_separate_labelled_link() -> None:
    from app.web.layout_suggestion import adopt_layout, same_hardware

    mine = _request(f"/estimate?{XE9680_H100}")
    other = mine.model_copy(update={"hardware": mine.hardware.model_copy(update={"gpu": "b200-sxm-180gb",
                                                                                   "server": None}),
                                    "parallelism": mine.parallelism.model_copy(update={"tp": 8})})
    adopted = adopt_layout(mine, other)
    assert not same_hardware(mine, other) and same_hardware(mine, adopted)
    assert adopted.parallelism.tp == 8 and adopted.cost == mine.cost and adopted.host == mine.host


def test_the_estimate_shows_the_global_batch_the_suggestion_and_planner_use(client: TestClient) -> None:
    page = client.get(f"/estimate?{XE9680_H100}").text
    assert _text(page, "global-batch").startswith("8 sequences")
    assert "Global batch: 8 sequences" in unescape(page)
    card = client.get(f"/estimate/layout?{XE9680_H100}").text
    assert "Global batch: 8 sequences" in unescape(card)
    plan_url = _href(card, "layout-plan-link")
    assert plan_url and parse_qs(urlsplit(plan_url).query)["global_batch_size"] == ["8"]
    use = _request(_href(card, "use-layout") or "")
    t = use.training
    assert t.micro_batch_size * t.gradient_accumulation_steps * use.dp == 8


def test_ways_to_make_it_fit_and_the_suggestion_name_the_same_recipe_the_same_way(client: TestClient) -> None:
    page = client.get(f"/estimate?{XE9680_H100}").text
    card = client.get(f"/estimate/layout?{XE9680_H100}").text
    words = _text(card, "layout-words").split(":", 1)[1].split(" — ")[0].strip()
    table = page[page.index('id="ways-table"'):page.index("</table>", page.index('id="ways-table"'))]
    rows = re.findall(r"<tr><td>.*?</tr>", table, re.S)
    assert rows
    for row in rows:
        recipe = unescape(re.search(r'class="muted way-recipe">([^<]*)<', row).group(1))  # type: ignore[union-attr]
        assert recipe.split(" ")[0] in {"pytorch", "deepspeed", "megatron"}, "the framework is named"
        per_gpu = unescape(re.findall(r'<td class="num">([^<]*)</td>', row)[0])
        if recipe == words:
            assert per_gpu == _text(card, "layout-mem").split(" per GPU")[0]


def test_compare_shows_the_users_layout_and_the_planners_best_per_option(client: TestClient) -> None:
    job = ("model=llama-3.1-70b&training.method=full&training.train_tokens=1e9&parallelism.sharding=zero3"
           "&parallelism.offload=optimizer%2Bparams&training.activation_checkpointing=full&hardware.gpu=h100-sxm5-80gb")
    html = client.get(f"/compare?{job}&gpus=h100-sxm5-80gb&gpus=h200-sxm-141gb&gpus=b200-sxm-180gb").text
    rows = re.findall(r'<tr data-option="([^"]+)" data-layout="(\w+)"', html)
    assert [r[1] for r in rows] == ["yours", "planner"] * 3
    assert "your layout" in html and "planner's best layout for this option" in unescape(html)
    planned = {opt: _request(unescape(u)) for opt, u in re.findall(
        r'data-option="([^"]+)" data-layout="planner".*?<a href="([^"]+)"', html, re.S)}
    assert planned["b200-sxm-180gb"].parallelism.offload == "none", "the B200 is not held to the H100's offload"


def test_compare_shows_no_speed_or_cost_for_an_option_that_does_not_fit(client: TestClient) -> None:
    job = "model=llama-3.1-70b&training.method=full&training.train_tokens=1e9&hardware.gpu=a100-sxm4-80gb"
    html = client.get(f"/compare?{job}&gpus=a100-sxm4-80gb").text
    row = re.search(r'<tr data-option="a100-sxm4-80gb" data-layout="yours".*?</tr>', html, re.S)
    assert row and "Does not fit" in row.group(0)
    for cls in ("tps", "ttt"):
        assert re.search(rf'class="num {cls}">–<', row.group(0)), cls
    assert re.search(r'class="num cost" >–<', row.group(0))


def test_the_faq_links_the_serving_estimate(client: TestClient) -> None:
    page = unescape(client.get("/faq").text)
    section = page[page.index('id="faq-serve"'):]
    section = section[:section.index("</section>")]
    assert "no serving estimator" not in page
    assert 'href="/serve?' in section


def test_serve_it_opens_on_the_smallest_tensor_parallel_size_that_starts(client: TestClient) -> None:
    page = client.get("/estimate?model=llama-3.1-70b&training.method=lora&hardware.server=nvidia-dgx-a100-640gb").text
    url = _href(page, "serve-link")
    assert url
    serve = client.get(url).text
    assert 'id="starts-badge">starts' in serve
    tp = int(parse_qs(urlsplit(url).query).get("tp", ["1"])[0])
    if tp > 1:  # one less does not start
        smaller = re.sub(r"tp=\d+", f"tp={tp // 2}", url)
        assert "will not start" in client.get(smaller).text


def test_the_longest_single_request_is_not_above_max_model_len(client: TestClient) -> None:
    serve = unescape(client.get("/serve?model=llama-3.1-70b&gpu=a100-sxm4-80gb&server=nvidia-dgx-a100-640gb&tp=8"
                                "&max_model_len=8192").text)
    cell = _text(serve, "longest-request")
    assert int(cell.split(" tokens")[0].replace(",", "")) <= 8192


def _kw(html: str, dom_id: str) -> float:
    return float(_text(html, dom_id).split(" kW")[0].replace(",", ""))


def test_power_and_rack_read_the_same_on_the_estimate_and_tco(client: TestClient) -> None:
    from app.services.power import node_power, rack_fit
    from hardware_catalog import load_catalog

    job = XE9680_H100 + ("&parallelism.sharding=zero3&parallelism.offload=optimizer&parallelism.framework=deepspeed"
                         "&training.activation_checkpointing=full")
    page = client.get(f"/estimate?{job}").text
    tco = client.get(f"/tco?server=dell-xe9680-h100&{job}").text
    power = node_power(load_catalog(), "dell-xe9680-h100")
    for label, est_id, tco_id, value in (("peak", "node-power-peak", "tco-power-peak", power.peak_kw),
                                         ("at load", "node-power-load", "tco-power-load", power.at_load_kw),
                                         ("average", "node-power-avg", "tco-power-avg", power.average_kw)):
        assert _kw(page, est_id) == _kw(tco, tco_id) == round(value, 1), label
    assert "average at 80% utilisation" in unescape(page) and "average at 80% utilisation" in unescape(tco)
    kw = float(load_catalog().tco_defaults.value("rack_kw"))  # the one default rack budget (40.8 kW)
    rack = rack_fit(load_catalog(), "dell-xe9680-h100", kw)
    assert _text(page, "node-rack").startswith(f"{rack.nodes_per_rack} nodes")
    assert _text(tco, "kpi-rack-nodes").startswith(str(rack.nodes_per_rack))
    assert f"Per {kw:g} kW rack" in page and f"Nodes per {kw:g} kW rack" in unescape(tco)


def test_the_tco_headline_says_how_it_squares_with_the_per_run_table(client: TestClient) -> None:
    job = XE9680_H100 + ("&parallelism.sharding=zero3&parallelism.offload=optimizer&parallelism.framework=deepspeed"
                         "&training.activation_checkpointing=full")
    tco = unescape(client.get(f"/tco?server=dell-xe9680-h100&{job}").text)
    headline = _text(tco, "tco-verdict")
    runs = re.search(r'id="job-runs".*?</table>', tco, re.S)
    assert runs
    cells = dict(re.findall(r'<th scope="row">([^<]+)</th><td>[^<]*</td><td class="num cost" data-usd="([\d.]+)"',
                            runs.group(0)))
    owned = next(float(v) for k, v in cells.items() if k.startswith("own "))
    offer = re.search(r"Renting (.+?\(on-demand\))", headline)
    if offer and float(cells[offer.group(1)]) > owned:  # the horizon favours renting, the run owning
        note = _text(tco, "tco-per-run")
        assert "Per run of this job, owning is cheaper" in note and "amortises" in note


@pytest.mark.parametrize("typed", ["1B", "1,000,000,000", "1e9", "1000000000", "1 B"])
def test_token_counts_are_read_as_people_type_them(client: TestClient, typed: str) -> None:
    from urllib.parse import quote

    base = "/estimate?model=llama-3.1-8b&training.method=lora&hardware.gpu=h100-sxm5-80gb&hardware.gpus_per_node=1"
    page = client.get(f"{base}&training.train_tokens={quote(typed)}")
    assert page.status_code == 200, typed
    plain = client.get(f"{base}&training.train_tokens=1000000000").text
    assert _text(page.text, "kpi-ttt") == _text(plain, "kpi-ttt")


def test_a_portuguese_price_and_token_count_are_accepted(client: TestClient) -> None:
    job = ("model=llama-3.1-8b&training.method=lora&training.train_tokens=1.000.000.000&hardware.gpu=h100-sxm5-80gb"
           "&hardware.gpus_per_node=1")
    client.cookies.set("capplan_lang", "pt_BR")
    try:
        page = client.get(f"/estimate?{job}")
        assert page.status_code == 200 and 'id="kpi-ttt"' in page.text
        prefill = re.search(r'id="quote-price"[^>]*value="([^"]*)"', page.text)
        assert prefill and "," in prefill.group(1), "pre-filled in pt-BR format"
        saved = client.post("/quotes", data={"query": job.replace("1.000.000.000", "1000000000"), "name": "q",
                                             "customer": "ACME", "price": "12.500,50"},
                            headers={"Origin": "http://testserver"}, follow_redirects=False)
        assert saved.status_code == 303, saved.text[:300]
        qid = urlsplit(saved.headers["location"]).path.rstrip("/").split("/")[-1]
        assert client.get(f"/api/v1/quotes/{qid}.json").json()["revisions"][0]["price"] in ("12500.50", "12500.5",
                                                                                            12500.5)
    finally:
        client.cookies.delete("capplan_lang")


def test_the_planner_page_ranks_no_megatron_for_lora_and_no_part_of_a_cloud_instance(client: TestClient) -> None:
    html = unescape(client.get("/plan?model=llama-3.1-8b&training.method=lora&training.train_tokens=1e9"
                               "&objective=cost&constraints.gpus=h100-sxm5-80gb&constraints.max_nodes=1").text)
    assert 'id="plan-winner"' in html
    urls = re.findall(r'href="(/estimate\?[^"]+)"', html)
    chosen = [_request(u) for u in urls]
    assert chosen, "the ranked plans link their estimates"
    assert all(r.parallelism.framework != "megatron" for r in chosen), "Megatron-LM has no LoRA"
    winner = re.search(r'id="plan-winner">[^<]*·\s*(\d+)×(\d+)', html)
    assert winner and int(winner.group(2)) == 8, "a p5.48xlarge is rented whole (8 GPUs)"
    from app.services.plan_rules import plan_problem, usable_plan
    from estimator.planner.plan import PlanRequest
    from hardware_catalog import load_catalog

    catalog = load_catalog()
    response = usable_plan(PlanRequest.model_validate({
        "model": "llama-3.1-8b", "training": {"method": "lora", "train_tokens": 1e9}, "objective": "cost",
        "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 1}}), catalog)
    assert response.plans and all(plan_problem(p, catalog) is None for p in response.plans)


def test_brl_needs_a_dated_sourced_rate_and_the_pages_show_it_formatted_by_babel(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    from babel.numbers import format_currency

    with pytest.raises(ValueError, match="CAPPLAN_BRL_RATE_DATE"):
        Settings(database_url="sqlite://", brl_per_usd=5.0)
    with pytest.raises(ValueError, match="CAPPLAN_BRL_PER_USD"):
        Settings(database_url="sqlite://", currency="BRL")
    db = tmp_path_factory.mktemp("brl") / "brl.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_pages="100000/minute", brl_per_usd=5.5, brl_rate_date="2026-12-01",
                        brl_rate_source="Banco Central do Brasil PTAX")
    job = XE9680_H100 + ("&parallelism.sharding=zero3&parallelism.offload=optimizer&parallelism.framework=deepspeed"
                         "&training.activation_checkpointing=full")
    with TestClient(create_app(settings)) as brl:
        usd_page = brl.get(f"/estimate?{job}").text
        usd = float(_attr(usd_page, "kpi-cost", "data-usd") or 0)
        assert _text(usd_page, "kpi-cost").startswith(f"${usd:,.0f}") and 'id="currency-BRL"' in usd_page
        brl.cookies.set("capplan_currency", "BRL")
        brl.cookies.set("capplan_lang", "pt_BR")
        page = brl.get(f"/estimate?{job}").text
        assert _attr(page, "kpi-cost", "data-usd") == f"{usd:.2f}", "the USD amount stays in data-usd"
        shown = format_currency(usd * 5.5, "BRL", format="¤ #,##0", locale="pt_BR", currency_digits=False)
        assert _text(page, "kpi-cost").startswith(unescape(shown)), (_text(page, "kpi-cost"), shown)
        rate_note = _text(page, "currency-rate") or ""
        assert "5,5000" in rate_note and "2026-12-01" in rate_note and "PTAX" in rate_note
        assert "US$" not in (_text(page, "kpi-cost") or ""), "one currency in one figure"


def test_the_customer_quote_in_portuguese_says_what_the_price_covers_and_nothing_internal(client: TestClient) -> None:
    job = XE9680_H100 + ("&parallelism.sharding=zero3&parallelism.offload=optimizer&parallelism.framework=deepspeed"
                         "&training.activation_checkpointing=full")
    saved = client.post("/quotes", data={"query": job, "name": "XE9680", "customer": "ACME", "price": "2500"},
                        headers={"Origin": "http://testserver"}, follow_redirects=False)
    qid = urlsplit(saved.headers["location"]).path.rstrip("/").split("/")[-1]
    english = unescape(client.get(f"/api/v1/quotes/{qid}/print").text)
    assert "What the price covers" in english and "optimizer offloaded to CPU memory" in english
    assert "docs/" not in english and "accuracy.md" not in english
    pt = unescape(client.get(f"/api/v1/quotes/{qid}/print?lang=pt_BR").text)
    for words in ("Oferta", "O que o preço cobre", "Válida até", "Memória por GPU", "US$ 2.500,00", "GiB"):
        assert words in pt, words
    for english_words in ("Offer", "Quoted price", "Valid until", "Time to train", "$2,500.00", "Cost to train"):
        assert english_words not in pt, english_words
    assert re.search(r"\d{1,3}(?:\.\d{3})*,\d GiB", pt), "pt-BR decimals"
    if shutil.which("pdftotext"):
        body = client.get(f"/api/v1/quotes/{qid}.pdf?lang=pt_BR").content
        text = subprocess.run(["pdftotext", "-layout", "-", "-"], input=body, capture_output=True,
                              check=True).stdout.decode()
        assert "Oferta" in text and "US$ 2.500,00" in text and "Offer" not in text
    assert client.get(f"/api/v1/quotes/{qid}/print?lang=xx").status_code == 422


def test_the_quote_carries_power_rack_and_a_priced_bill_of_materials(client: TestClient) -> None:
    job = XE9680_H100 + ("&parallelism.sharding=zero3&parallelism.offload=optimizer&parallelism.framework=deepspeed"
                         "&training.activation_checkpointing=full")
    page = client.get(f"/estimate?{job}").text
    saved = client.post("/quotes", data={"query": job, "name": "XE9680", "customer": "ACME", "price": "2500"},
                        headers={"Origin": "http://testserver"}, follow_redirects=False)
    qid = urlsplit(saved.headers["location"]).path.rstrip("/").split("/")[-1]
    doc = unescape(client.get(f"/api/v1/quotes/{qid}/print").text)
    lines = dict((re.sub(r"<[^>]+>", "", a), re.sub(r"<[^>]+>", "", b))
                 for a, b in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", doc, re.S))
    power = lines["Power per node"]
    for est_id in ("node-power-peak", "node-power-load", "node-power-avg"):
        assert _text(page, est_id) in power, est_id
    rack = next(v for k, v in lines.items() if k.startswith("Per ") and k.endswith("kW rack"))
    assert rack.startswith(_text(page, "node-rack").split(" ")[0] + " nodes")
    assert "Bill of materials" in doc and "no catalog price" in lines["Server: Dell PowerEdge XE9680 (8x H100 SXM5)"]
    dgx = "model=llama-3.1-8b&training.method=lora&training.train_tokens=1e9&hardware.server=nvidia-dgx-h100"
    saved = client.post("/quotes", data={"query": dgx, "name": "DGX", "customer": "ACME", "price": "2500"},
                        headers={"Origin": "http://testserver"}, follow_redirects=False)
    qid = urlsplit(saved.headers["location"]).path.rstrip("/").split("/")[-1]
    doc = unescape(client.get(f"/api/v1/quotes/{qid}/print").text)
    assert re.search(r"<th>Server: NVIDIA DGX H100[^<]*</th><td>1 x \$270,000 = \$270,000</td>", doc)
    assert "Priced items: $270,000" in doc


def test_a_quote_of_several_options_from_compare_shows_them_side_by_side(client: TestClient) -> None:
    job = "model=llama-3.1-8b&training.method=lora&training.train_tokens=1e9&hardware.gpu=h100-sxm5-80gb"
    compare = client.get(f"/compare?{job}&servers=nvidia-dgx-h100&servers=nvidia-dgx-a100-640gb").text
    assert 'id="multi-quote-form"' in compare
    values = re.findall(r'name="option" value="([^"]+)"', compare)
    picked = [v for v in values if v.startswith("yours|")][:2] + [v for v in values if v.startswith("planner|")][:1]
    assert len(picked) == 3
    query = unescape(re.search(r'id="multi-quote-form">\s*<input type="hidden" name="query" value="([^"]*)"',
                               compare).group(1))  # type: ignore[union-attr]
    saved = client.post("/quotes/options", data={"query": query, "option": picked, "name": "ACME 8B",
                                                 "customer": "ACME", "price": "1000"},
                        headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert saved.status_code == 303, saved.text[:400]
    doc = unescape(client.get(saved.headers["location"]).text)
    heads = re.findall(r'<th scope="col" data-quote="(\d+)">', doc)
    assert len(heads) == 3
    for label in ("Per-GPU memory", "Time to train", "Cost to train", "Power per node", "Quoted price", "Parallelism"):
        row = re.search(rf"<tr><th scope=\"row\">{re.escape(label)}</th>(.*?)</tr>", doc, re.S)
        assert row and row.group(1).count("<td>") == 3, label
    # each column is the saved quote's own figures: the same as that option's estimate
    dgx = re.search(r'<tr data-option="nvidia-dgx-h100" data-layout="yours".*?</tr>', compare, re.S)
    assert dgx
    usd = re.search(r'data-usd="([\d.]+)"', dgx.group(0)).group(1)  # type: ignore[union-attr]
    from app.web.templating import money

    assert money(float(usd)) in doc
    assert "What the price covers" in doc and "docs/" not in doc
    pt = unescape(client.get(saved.headers["location"] + "&lang=pt_BR").text)
    assert "Opções para ACME" in pt and "Memória por GPU" in pt
    pdf = client.get(saved.headers["location"].replace("side-by-side?", "side-by-side.pdf?"))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")
    one = client.post("/quotes/options", data={"query": query, "option": picked[:1], "name": "x", "customer": "y"},
                      headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert one.status_code == 422 and "two to four" in one.text


def _figures(html: str) -> dict[str, Any]:
    import json

    return {name: json.loads(body) for name, body in
            re.findall(r'<script type="application/json" id="fig-([\w-]+)">(.*?)</script>', html, re.S)}


def test_chart_labels_and_ticks_follow_portuguese(client: TestClient) -> None:
    job = "model=llama-3.1-8b&training.method=lora&training.train_tokens=1e9&hardware.gpu=h100-sxm5-80gb"
    client.cookies.set("capplan_lang", "pt_BR")
    try:
        compare = client.get(f"/compare?{job}&servers=nvidia-dgx-h100&servers=nvidia-dgx-a100-640gb").text
        tco = client.get(f"/tco?server=nvidia-dgx-h100&{job}").text
    finally:
        client.cookies.delete("capplan_lang")
    figs = _figures(compare)
    assert figs, "the compare charts carry their figures"
    cost_text = figs["cmp-cost"]["data"][0]["text"]
    assert all(t.startswith("US$ ") and not re.search(r"\.\d{1,2}$", t) for t in cost_text if t != "n/a"), cost_text
    speed = figs["cmp-speed"]["data"][0]["text"]
    assert not any(re.search(r"\d\.\d", t) for t in speed), speed  # "1,63k", never "1.63k"
    for fig in _figures(tco).values():
        for axis in ("yaxis", "xaxis"):
            ax = fig["layout"].get(axis, {})
            assert "$" not in str(ax.get("tickformat", "")), (axis, ax)
            if ax.get("tickprefix"):
                assert ax["tickprefix"] == "US$ "


def test_a_quote_of_several_options_from_tco_keeps_each_rows_cost(client: TestClient) -> None:
    job = ("model=llama-3.1-8b&training.method=lora&training.train_tokens=1e9&hardware.server=nvidia-dgx-h100"
           "&parallelism.sharding=zero3")
    tco = client.get(f"/tco?server=nvidia-dgx-h100&{job}").text
    form = re.search(r'<form method="post" action="/quotes/options" id="tco-quote-form">.*?</form>', tco, re.S)
    assert form, "the per-run table offers a multi-option quote"
    query = unescape(re.search(r'name="query" value="([^"]*)"', form.group(0)).group(1))  # type: ignore[union-attr]
    values = [unescape(v) for v in re.findall(r'name="option" value="([^"]+)"', form.group(0))]
    own = next(v for v in values if v.startswith("own|"))
    rent = next(v for v in values if v.startswith("rent|") and v.endswith("@on-demand"))
    saved = client.post("/quotes/options", data={"query": query, "option": [own, rent], "name": "DGX",
                                                 "customer": "ACME"},
                        headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert saved.status_code == 303, saved.text[:400]
    doc = unescape(client.get(saved.headers["location"]).text)
    from app.web.templating import money

    runs = re.search(r'id="job-runs".*?</table>', tco, re.S).group(0)  # type: ignore[union-attr]
    own_usd = re.search(r'<tr data-kind="own">.*?data-usd="([\d.]+)"', runs, re.S).group(1)  # type: ignore[union-attr]
    assert money(float(own_usd)) in doc, "the owned column costs what /tco's owned row costs"
    for raw in ("nvidia-dgx-h100", "aws-p5-48xlarge", "coreweave-h100"):
        assert raw not in re.sub(r'href="[^"]*"', "", doc), raw
