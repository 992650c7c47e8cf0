"""The planner page through TestClient: the form, the ranked table, server-side sorting, the chart's data, the
exports, errors next to their field (never a 500), htmx fragments and the progress endpoint."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app
from app.services.plan_rules import usable_plan
from app.web.assets import asset_url
from app.web.planner_page import COLUMNS, PROGRESS, ProgressBoard, parse_plan_form, progress_text
from estimator.planner.plan import PlanRequest, PlanResponse
from tests.test_static import external_assets

H100 = "h100-sxm5-80gb"
JOB = {"model": "llama-3.1-70b", "training.method": "lora", "training.seq_len": "4096", "training.train_tokens": "1e9",
       "objective": "time", "constraints.gpus": H100, "constraints.max_nodes": "2"}
JOB_QUERY = urlencode(JOB)
LLAMA_8B_HF = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
               "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("planner") / "planner.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def catalog(client: TestClient) -> object:
    return client.app.state.catalog_cache.source  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def expected(catalog: object) -> PlanResponse:
    """The same search through the planner, as the app reads it (app.services.plan_rules: no Megatron for LoRA)."""
    return usable_plan(PlanRequest.model_validate({
        "model": "llama-3.1-70b", "training": {"method": "lora", "seq_len": 4096, "train_tokens": 1e9},
        "objective": "time", "constraints": {"gpus": [H100], "max_nodes": 2},
    }), catalog)


@pytest.fixture(scope="module")
def job_page(client: TestClient) -> str:
    response = client.get(f"/plan?{JOB_QUERY}")
    assert response.status_code == 200, response.text[-2000:]
    return response.text


def _error(html: str, dom_id: str) -> str:
    match = re.search(rf'<span class="field-error" id="err-{re.escape(dom_id)}"[^>]*>([^<]*)</span>', html)
    assert match, f"no error slot for {dom_id}"
    return unescape(match.group(1))


def _rows(html: str) -> list[str]:
    """The ``data-plan`` id of each table row, in page order."""
    return re.findall(r'<tr data-plan="([^"]+)"', html)


def _column(html: str, key: str) -> list[float | None]:
    """The sort values (``data-v``) of one column, in row order."""
    index = [c.key for c in COLUMNS].index(key)
    body = re.search(r'<table class="table plan-table".*?<tbody>(.*?)</tbody>', html, re.S)
    assert body, "no plan table"
    out: list[float | None] = []
    for row in re.findall(r"<tr data-plan=.*?</tr>", body.group(1), re.S):
        raw = re.findall(r'<td[^>]*data-v="([^"]*)"', row)[index]
        out.append(float(raw) if raw else None)
    return out


def _shown(html: str, dom_id: str) -> str:
    """The value of a text input, or the contents of a textarea."""
    area = re.search(rf'<textarea id="{dom_id}"[^>]*>(.*?)</textarea>', html, re.S)
    if area:
        return unescape(area.group(1))
    match = re.search(rf'<input id="{dom_id}"[^>]*value="([^"]*)"', html)
    assert match, f"no input {dom_id}"
    return unescape(match.group(1))


def _figure(html: str, name: str) -> dict:
    match = re.search(rf'<script type="application/json" id="fig-{name}">(.*?)</script>', html, re.S)
    assert match, f"no figure {name}"
    return json.loads(match.group(1))


def _th(html: str, key: str) -> str:
    match = re.search(rf'<th [^>]*data-key="{key}"[^>]*>.*?</th>', html, re.S)
    assert match, f"no header {key}"
    return match.group(0)


# --- the form ---------------------------------------------------------------------------------------------------

def test_first_visit_shows_the_form_and_no_search(client: TestClient) -> None:
    response = client.get("/plan")
    assert response.status_code == 200
    html = response.text
    assert '<form id="plan-form"' in html and 'action="/plan" method="get"' in html
    assert 'hx-get="/plan"' in html and 'hx-indicator="#plan-busy"' in html
    assert 'id="plan-table"' not in html and "Which layout is fastest" in html
    for control in ("f-model", "f-model-json", "f-training-method-lora", "f-training-seq-len", "f-global-batch-size",
                    "f-training-train-tokens", "f-objective-time", "f-objective-cost", "f-constraints-max-nodes",
                    "f-constraints-budget-usd", "f-constraints-deadline-days", "f-pricing"):
        assert f'id="{control}"' in html, control
    assert f'name="constraints.gpus" value="{H100}"' in html
    assert 'name="constraints.servers" value="dell-xe9680-h100"' in html
    assert '<option value="llama-3.1-70b" selected>' in html
    assert asset_url("js/planner.js") in html and external_assets(html) == []
    assert "Searching layouts…" in html  # the htmx indicator


def test_the_nav_links_the_planner(client: TestClient) -> None:
    home = client.get("/").text
    assert '<a href="/plan">Planner</a>' in home
    assert "soon" not in home.lower()
    assert '<a href="/plan" aria-current="page">Planner</a>' in client.get("/plan").text


# --- the result -------------------------------------------------------------------------------------------------

def test_the_table_has_one_row_per_plan_in_rank_order(job_page: str, expected: PlanResponse) -> None:
    assert len(expected.plans) >= 2
    assert _rows(job_page) == [p.id for p in expected.plans]
    assert _column(job_page, "rank") == [float(p.rank) for p in expected.plans]
    header = re.search(r"<thead>.*?</thead>", job_page, re.S).group(0)  # type: ignore[union-attr]
    for label in ("Layout", "GPU", "Nodes", "Sharding", "TP", "PP", "Micro-batch", "Checkpointing",
                  "Fits / headroom", "Step time", "Tokens/s", "MFU", "Time to train", "Cost"):
        assert f">{label}</a>" in header, label
    best = expected.plans[0]
    assert unescape(best.label.replace(" | ", " · ")) in unescape(job_page)
    assert _column(job_page, "cost")[0] == pytest.approx(best.cost.cost_usd)  # type: ignore[union-attr]
    assert _column(job_page, "ttt")[0] == pytest.approx(best.time_to_train_s)
    assert 'aria-sort="ascending"' in _th(job_page, "rank")
    assert job_page.count('class="row-front"') == len(expected.pareto_front)
    assert 'id="plan-winner"' in job_page and "Best by time" in job_page


def test_explanation_notes_and_search_stats_are_shown(job_page: str, expected: PlanResponse) -> None:
    html = unescape(job_page)
    for line in expected.explanation + expected.notes:
        assert line in html
    assert f"Searched {expected.search.space_size:,} layouts" in html


def test_the_chart_has_every_priced_plan_and_the_front(job_page: str, expected: PlanResponse) -> None:
    fig = _figure(job_page, "plan")
    traces = {t["name"]: t for t in fig["data"]}
    assert set(traces) == {"NVIDIA H100 SXM5 80GB", "Pareto front", "Best (fastest)"}
    gpu = traces["NVIDIA H100 SXM5 80GB"]
    assert sorted(gpu["customdata"]) == [p.rank for p in expected.plans]
    by_id = {p.id: p for p in expected.plans}
    assert traces["Pareto front"]["customdata"] == [by_id[i].rank for i in expected.pareto_front]
    assert traces["Pareto front"]["y"] == pytest.approx([by_id[i].cost.cost_usd for i in expected.pareto_front])
    assert traces["Best (fastest)"]["x"] == pytest.approx([expected.plans[0].time_to_train_s / 3600])
    assert fig["layout"]["xaxis"]["title"]["text"] == "time to train (hours)"
    assert 'id="chart-plan"' in job_page


def test_each_plan_has_its_exports_in_details(job_page: str, expected: PlanResponse) -> None:
    html = unescape(job_page)
    assert html.count('<details class="plan-exports"') == len(expected.plans)
    assert '<details class="plan-exports" id="plan-1" open>' in html
    first = re.search(r'<details class="plan-exports" id="plan-1".*?(?=<details class="plan-exports"|</section>)',
                      html, re.S).group(0)  # type: ignore[union-attr]
    e = expected.plans[0].exports
    assert 'data-export="torchrun"' in first and "torchrun \\\n    --nnodes=2" in first
    assert 'data-export="nccl"' in first
    for var in e.environment:
        assert f"export {var.name}=" in first and var.reason in first
    if e.megatron_args:
        assert 'data-export="megatron"' in first and e.megatron_args[0] in first
    if e.deepspeed_config:
        assert json.dumps(e.deepspeed_config, indent=2) in first
    assert '<pre class="code"' in first and "/estimate?" in first
    kinds = set(re.findall(r'data-export="(\w+)"', html))
    assert {"torchrun", "nccl"} <= kinds


def test_a_deepspeed_plan_shows_its_json_and_accelerate_yaml(client: TestClient) -> None:
    # LoRA: the app ranks PyTorch and DeepSpeed layouts for it (a full 8B on one node ranks Megatron first)
    html = unescape(client.get("/plan?" + urlencode({**JOB, "model": "llama-3.1-8b", "training.method": "lora",
                                                      "constraints.max_nodes": "1"})).text)
    assert 'data-export="deepspeed"' in html and '"zero_optimization": {' in html
    assert 'data-export="accelerate"' in html and "distributed_type: DEEPSPEED" in html


# --- sorting ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "direction"), [("cost", "asc"), ("cost", "desc"), ("step", "asc"), ("tps", "desc"),
                                                ("mfu", "desc"), ("headroom", "asc"), ("nodes", "desc")])
def test_the_sort_param_orders_the_rows_on_the_server(client: TestClient, key: str, direction: str) -> None:
    html = client.get(f"/plan?{JOB_QUERY}&sort={key}&dir={direction}").text
    values = _column(html, key)
    assert None not in values and len(values) >= 2
    assert values == sorted(values, reverse=direction == "desc")  # type: ignore[type-var]
    state = "ascending" if direction == "asc" else "descending"
    assert f'aria-sort="{state}"' in _th(html, key)
    assert "aria-sort" not in _th(html, "rank")
    assert f'name="sort" value="{key}" id="plan-sort"' in html  # a new search keeps the order


def test_header_links_sort_without_javascript_and_toggle(client: TestClient) -> None:
    html = client.get(f"/plan?{JOB_QUERY}&sort=cost&dir=asc").text
    links = {k: unescape(re.search(r'href="([^"]+)"', _th(html, k)).group(1)) for k in ("cost", "tps", "step")}  # type: ignore[union-attr]
    for key, direction in (("cost", "desc"), ("tps", "desc"), ("step", "asc")):
        query = parse_qs(urlsplit(links[key]).query)
        assert query["sort"] == [key] and query["dir"] == [direction]
        assert query["constraints.max_nodes"] == ["2"] and query["constraints.gpus"] == [H100]
    assert client.get(links["cost"]).status_code == 200


def test_an_unknown_sort_falls_back_to_rank(client: TestClient, expected: PlanResponse) -> None:
    html = client.get(f"/plan?{JOB_QUERY}&sort=nope&dir=sideways").text
    assert _rows(html) == [p.id for p in expected.plans]


def test_objective_cost_puts_the_cheapest_first(client: TestClient) -> None:
    html = client.get("/plan?" + urlencode({**JOB, "objective": "cost"})).text
    costs = _column(html, "cost")
    assert costs[0] == min(c for c in costs if c is not None)
    assert "Best by cost" in html and '"Best (cheapest)"' in html


def test_without_tokens_the_costs_are_per_million_tokens(client: TestClient) -> None:
    html = client.get("/plan?" + urlencode({**JOB, "training.train_tokens": ""})).text
    assert "/M tok" in html
    assert _figure(html, "plan")["layout"]["xaxis"]["title"]["text"] == "step time (s)"
    assert set(_column(html, "ttt")) == {None}


def test_a_pasted_config_json_is_planned(client: TestClient) -> None:
    query = urlencode({**JOB, "model_json": json.dumps(LLAMA_8B_HF), "constraints.max_nodes": "1"})
    response = client.get(f"/plan?{query}")
    assert response.status_code == 200, _error(response.text, "f-model-json")
    assert len(_rows(response.text)) >= 1


def test_nothing_fits_is_a_page_with_the_reason(client: TestClient) -> None:
    query = urlencode({**JOB, "model": "llama-3.1-405b", "training.method": "full", "constraints.gpus": "l40s-48gb",
                       "constraints.max_nodes": "1"})
    response = client.get(f"/plan?{query}")
    assert response.status_code == 200
    assert _rows(response.text) == [] and "No plan" in response.text
    # One L40S cannot hold it at all; on 2-8 of them only CPU offload fits the GPUs, and then the node would
    # need over 6 TiB of host RAM (405B x 16 B of offloaded states), past the 4 TiB ceiling of a server whose
    # maximum the catalog does not know: host RAM is the binding constraint, and the page says so with numbers.
    assert "no layout fits in GPU memory" in response.text  # the 1x1 world
    explanation = re.search(r'id="plan-explanation">(.*?)</ul>', response.text, re.S)
    assert explanation is not None and "Host RAM binds" in explanation.group(1)
    assert re.search(r"needs [6-9],\d{3} GiB of host RAM per node", explanation.group(1))
    assert "4,096 GiB" in explanation.group(1)


def test_a_deadline_too_short_leaves_no_plan_and_says_so(client: TestClient) -> None:
    response = client.get("/plan?" + urlencode({**JOB, "constraints.deadline_days": "0.01"}))
    assert response.status_code == 200 and _rows(response.text) == []
    assert "miss the budget or deadline" in response.text
    # the planner's own notes are estimator messages: in Portuguese on a pt-BR page
    pt = client.get("/plan?" + urlencode({**JOB, "constraints.deadline_days": "0.01"}),
                    headers={"Accept-Language": "pt-BR"})
    assert "estouram o orçamento ou o prazo" in pt.text and "miss the budget or deadline" not in pt.text


# --- reverse questions ------------------------------------------------------------------------------------------

def test_the_form_offers_the_reverse_questions(job_page: str) -> None:
    buttons = re.findall(r'<button type="submit" class="btn" name="question" value="([a-z-]+)"', job_page)
    assert buttons == ["fewest-gpus", "largest-model", "longest-sequence"]


@pytest.mark.parametrize(("question", "words"), [
    ("fewest-gpus", re.compile(r"\d+ GPUs \(1 node x \d\)")),
    ("largest-model", re.compile(r"largest preset [a-z0-9.-]+")),
    ("longest-sequence", re.compile(r"[\d,]+ tokens, as ")),
])
def test_a_reverse_question_is_answered_on_the_page(client: TestClient, catalog: object, question: str,
                                                    words: re.Pattern[str]) -> None:
    from estimator.planner.reverse import ReverseRequest, answer

    response = client.get("/plan?" + urlencode({**JOB, "question": question}))
    assert response.status_code == 200, response.text[-1500:]
    html = response.text
    table = re.search(r'<table class="table" id="reverse-table">(.*?)</table>', html, re.S)
    assert table is not None and _rows(html) == []  # the answer, not the ranked plans
    expected = answer(ReverseRequest.model_validate({
        "model": "llama-3.1-70b", "training": {"method": "lora", "seq_len": 4096, "train_tokens": 1e9},
        "objective": "time", "constraints": {"gpus": [H100], "max_nodes": 2}, "question": question}), catalog)
    (sentence,) = expected.answers
    shown = unescape(table.group(1))
    assert unescape(sentence.split(": ", 1)[1]) in shown and words.search(shown)
    assert 'aria-pressed="true"' in html and f'value="{question}"' in html
    share = re.search(r'id="plan-share" class="share" readonly value="([^"]+)"', html)
    assert share is not None and f"question={question}" in unescape(share.group(1))
    if question != "largest-model":  # the plan behind the answer opens in the estimator
        assert "/estimate?" in table.group(1)


def test_an_unknown_question_is_an_error_on_the_form(client: TestClient) -> None:
    response = client.get("/plan?" + urlencode({**JOB, "question": "cheapest"}))
    assert response.status_code == 422
    assert "Choose one of 'fewest-gpus'" in _error(response.text, "f-question")


# --- errors -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("field", "value", "dom_id", "message"), [
    ("training.seq_len", "lots", "f-training-seq-len", "Enter a whole number"),
    ("training.seq_len", "0", "f-training-seq-len", "Must be at least 1"),
    ("constraints.max_nodes", "0", "f-constraints-max-nodes", "Must be at least 1"),
    ("constraints.max_nodes", "2.5", "f-constraints-max-nodes", "Enter a whole number"),
    ("constraints.max_nodes", "5000", "f-constraints-max-nodes", "Must be at most 1024"),
    ("constraints.budget_usd", "-5", "f-constraints-budget-usd", "Must be more than 0"),
    ("constraints.budget_usd", "cheap", "f-constraints-budget-usd", "Enter a number, such as 1e9"),
    ("constraints.deadline_days", "0", "f-constraints-deadline-days", "Must be more than 0"),
    ("global_batch_size", "0", "f-global-batch-size", "Must be at least 1"),
    ("training.train_tokens", "many", "f-training-train-tokens", "Enter a number, such as 1e9"),
    ("training.method", "magic", "f-training-method", "Choose one of 'full', 'lora' or 'qlora'"),
    ("objective", "fast", "f-objective", "Choose one of 'time' or 'cost'"),
    ("pricing", "free", "f-pricing", "Choose one of 'on-demand', 'reserved' or 'owned'"),
    ("constraints.gpus", "h900", "f-constraints-gpus", "Unknown GPU 'h900'"),
    ("constraints.servers", "my-box", "f-constraints-servers", "Unknown server 'my-box'"),
    ("model", "gpt-9", "f-model", "unknown model preset 'gpt-9'"),
    ("model_json", "{not json", "f-model-json", "Not valid JSON"),
    ("model_json", "[1, 2]", "f-model-json", "Paste a JSON object"),
    ("model_json", '{"model_type": "llama"}', "f-model-json", "config.json lacks hidden_size"),
])
def test_bad_input_shows_the_form_again_with_the_message_next_to_the_field(
    client: TestClient, field: str, value: str, dom_id: str, message: str
) -> None:
    response = client.get("/plan?" + urlencode({**JOB, field: value}))
    assert response.status_code == 422, response.text[-1500:]
    html = response.text
    assert message in _error(html, dom_id)
    assert 'id="form-errors"' in html and 'id="plan-table"' not in html
    assert '<form id="plan-form"' in html
    if field not in ("constraints.gpus", "constraints.servers", "training.method", "objective", "pricing", "model"):
        assert _shown(html, dom_id) == value  # what was typed is there to correct


def test_a_budget_without_tokens_is_flagged_on_the_tokens_field(client: TestClient) -> None:
    response = client.get("/plan?" + urlencode({**JOB, "training.train_tokens": "", "constraints.budget_usd": "500"}))
    assert response.status_code == 422
    assert _error(response.text, "f-training-train-tokens") == "A budget or a deadline needs the tokens to train on"


def test_htmx_gets_the_fragment_with_out_of_band_errors(client: TestClient) -> None:
    headers = {"HX-Request": "true"}
    ok = client.get(f"/plan?{JOB_QUERY}&progress=abcdefgh1234", headers=headers)
    assert ok.status_code == 200 and "<html" not in ok.text and 'id="plan-table"' in ok.text
    push = ok.headers["HX-Push-Url"]
    assert push.startswith("/plan?") and "progress" not in push
    assert _rows(client.get(push).text) == _rows(ok.text)  # the pushed URL is the same search
    assert 'id="err-f-constraints-max-nodes" hx-swap-oob="true"' in ok.text

    bad = client.get("/plan?" + urlencode({**JOB, "constraints.max_nodes": "x"}), headers=headers)
    assert bad.status_code == 200  # htmx swaps 2xx only
    assert bad.headers["HX-Push-Url"] == "false"
    assert re.search(r'id="err-f-constraints-max-nodes" hx-swap-oob="true"[^>]*>Enter a whole number<', bad.text)
    assert 'id="form-errors"' in bad.text


def test_the_form_keeps_what_was_submitted(client: TestClient) -> None:
    html = client.get("/plan?" + urlencode({**JOB, "constraints.budget_usd": "900"})).text
    assert f'name="constraints.gpus" value="{H100}" checked' in html
    assert 'id="f-constraints-max-nodes" name="constraints.max_nodes" type="text" inputmode="numeric" value="2"' in html
    assert 'value="900"' in html and 'id="f-training-method-lora" name="training.method" value="lora" checked' in html


def test_parse_plan_form_builds_the_plan_request(catalog: object) -> None:
    from starlette.datastructures import QueryParams

    params = QueryParams([*JOB.items(), ("constraints.gpus", "h200-sxm-141gb"), ("global_batch_size", "64"),
                          ("constraints.deadline_days", "3")])
    form = parse_plan_form(params, catalog)
    assert not form.errors and form.request is not None
    req = form.request
    assert req.constraints.gpus == (H100, "h200-sxm-141gb") and req.constraints.max_nodes == 2
    assert req.constraints.deadline_days == 3 and req.global_batch_size == 64
    assert req.training.method == "lora" and req.training.train_tokens == 1e9 and req.objective == "time"
    assert parse_qs(form.query())["constraints.gpus"] == [H100, "h200-sxm-141gb"]


# --- progress ---------------------------------------------------------------------------------------------------

def test_the_progress_endpoint_reports_the_search(client: TestClient, expected: PlanResponse) -> None:
    client.get(f"/plan?{JOB_QUERY}&progress=progress-test-1", headers={"HX-Request": "true"})
    state = client.get("/plan/progress?id=progress-test-1")
    assert state.status_code == 200 and state.headers["cache-control"] == "no-store"
    total, st = expected.search.space_size, expected.search
    exact = st.memory_checks + st.time_evaluations
    assert st.layouts_screened > 0 and exact > 0
    assert state.json() == {"done": total, "total": total, "screened": st.layouts_screened, "exact": exact,
                            "text": f"Searching {total:,} layouts… 100% · {st.layouts_screened:,} screened at once, "
                                    f"{exact:,} estimated exactly"}
    assert client.get("/plan/progress?id=never-started").json()["total"] is None
    assert client.get("/plan/progress?id=<bad>").json() == {"done": None, "total": None, "screened": None,
                                                             "exact": None, "text": "Searching layouts…"}


def test_progress_board_records_the_callbacks_and_expires_old_ones() -> None:
    board = ProgressBoard(ttl_s=0.0, capacity=2)
    report = board.callback("a")
    report(0, 100)
    assert board.get("a") == (0, 100) and progress_text(board.get("a")) == "Searching 100 layouts… 0%"
    report(40, 100)
    assert progress_text(board.get("a")) == "Searching 100 layouts… 40%" and board.detail("a") is None
    report.detail(2500, 31)
    assert board.detail("a") == (2500, 31)
    assert progress_text(board.get("a"), board.detail("a")) == ("Searching 100 layouts… 40% · 2,500 screened at "
                                                                "once, 31 estimated exactly")
    board.update("b", 1, 2)
    board.update("c", 1, 2)
    assert board.get("c") == (1, 2) and len(board._items) <= 2
    assert progress_text(None) == "Searching layouts…"
    assert PROGRESS is not board


def test_the_mechanism_axis_is_a_form_toggle_and_each_changed_plan_says_so(client: TestClient, catalog: object) -> None:
    """Issue 29: the form's "Fine-tuning stack" section sends vary_mechanisms (one parameter per ticked box, kept
    in the share link); each row of a plan that changes a mechanism says which, with the GiB saved."""
    query = urlencode([("model", "llama-3.1-8b"), ("training.method", "lora"), ("training.seq_len", "65536"),
                       ("training.train_tokens", "1e9"), ("constraints.gpus", H100), ("constraints.max_nodes", "1"),
                       ("vary_mechanisms", "loss_kernel")])
    page = client.get("/plan?" + query).text
    assert re.search(r'name="vary_mechanisms" value="loss_kernel" checked', page)
    assert not re.search(r'name="vary_mechanisms" value="fused_kernels" checked', page)
    from starlette.datastructures import QueryParams

    form = parse_plan_form(QueryParams(query), catalog)
    assert form.request is not None and form.request.vary_mechanisms == ("loss_kernel",)
    assert "vary_mechanisms=loss_kernel" in form.query()
    expected = usable_plan(form.request, catalog)
    changed = [p for p in expected.plans if p.mechanism_changes is not None]
    assert changed  # 64k tokens: the fused loss lets larger micro-batches fit, which the planner ranks
    rows = {unescape(m.group(1)): m.group(0) for m in re.finditer(r'<tr data-plan="([^"]+)".*?</tr>', page, re.S)}
    assert set(rows) == {p.id for p in expected.plans}
    for p in expected.plans:
        row = rows[p.id]
        if p.mechanism_changes is None:
            assert "mechanism-changes" not in row
        else:
            assert "Changed: A fused loss" in unescape(row) and "GiB less per GPU" in row
