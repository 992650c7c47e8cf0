"""The planner page in a real browser: plan Llama 3.1 70B LoRA on H100 over at most 2 nodes, see the ranked
table and the time-vs-cost chart, re-sort the table by clicking a header; the same without JavaScript."""

from __future__ import annotations

import re
from pathlib import Path

H100 = "h100-sxm5-80gb"


def _column(page, key: str) -> list[float]:  # type: ignore[no-untyped-def]
    index = page.locator("#plan-table thead th").evaluate_all(
        f"ths => ths.findIndex(th => th.dataset.key === {key!r})")
    return page.locator("#plan-table tbody tr").evaluate_all(
        f"rows => rows.map(r => parseFloat(r.cells[{index}].dataset.v))")


def _plan_the_job(page) -> None:  # type: ignore[no-untyped-def]
    page.goto("/plan")
    assert page.locator("#f-model").input_value() == "llama-3.1-70b"
    page.locator("label[for='f-training-method-lora']").click()
    page.locator(f"input[name='constraints.gpus'][value='{H100}']").check()
    page.fill("#f-constraints-max-nodes", "2")
    page.get_by_role("button", name="Find plans").click()
    page.wait_for_selector("#plan-results #chart-plan .main-svg")
    page.wait_for_url(re.compile(r"/plan\?.*constraints\.max_nodes=2"))


def test_plan_70b_lora_on_h100_table_chart_and_sorting(page, traffic, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _plan_the_job(page)
    assert "constraints.gpus=" + H100 in page.url and "progress=" not in page.url
    rows = page.locator("#plan-table tbody tr")
    assert rows.count() >= 2
    assert all("H100" in t for t in rows.evaluate_all("rs => rs.map(r => r.cells[2].innerText)"))
    assert _column(page, "rank") == sorted(_column(page, "rank"))
    legend = page.locator("#chart-plan").inner_html()
    assert "Pareto front" in legend
    assert page.locator("#plan-explanation li").count() >= 1
    assert page.locator("#plan-1[open] .export").count() >= 3  # torchrun, NCCL and a framework config

    # for a look at the page (pytest keeps the last runs' tmp_path); test-artifacts/ is for failures only
    page.screenshot(path=str(tmp_path / "planner.png"), full_page=True)
    page.locator("#plan-table").screenshot(path=str(tmp_path / "planner-table.png"))

    requests_before = len(traffic.requests)
    cost = page.locator("#plan-table thead th[data-key='cost'] a")
    cost.click()
    page.wait_for_selector("#plan-table thead th[data-key='cost'][aria-sort='ascending']")
    costs = _column(page, "cost")
    assert costs == sorted(costs)
    assert "sort=cost" in page.url and "dir=asc" in page.url
    cost.click()
    page.wait_for_selector("#plan-table thead th[data-key='cost'][aria-sort='descending']")
    assert _column(page, "cost") == sorted(costs, reverse=True)
    page.locator("#plan-table thead th[data-key='tps'] a").click()  # throughput: best first
    page.wait_for_selector("#plan-table thead th[data-key='tps'][aria-sort='descending']")
    tps = _column(page, "tps")
    assert tps == sorted(tps, reverse=True)
    assert page.locator("#plan-table thead th[aria-sort]").count() == 1
    asked = [u for u in traffic.requests[requests_before:] if "/plan" in u]
    assert asked == [], "sorting in the browser asks the server for nothing"
    assert page.locator("#plan-sort").input_value() == "tps"


def test_bad_input_shows_the_message_next_to_the_field(page) -> None:  # type: ignore[no-untyped-def]
    page.goto("/plan")
    page.fill("#f-constraints-max-nodes", "none")
    page.get_by_role("button", name="Find plans").click()
    message = page.locator("#err-f-constraints-max-nodes")
    message.wait_for(state="visible")
    assert message.inner_text() == "Enter a whole number"
    assert page.locator("#form-errors").is_visible()
    assert page.url.endswith("/plan")  # the failed search is not pushed into the history
    page.fill("#f-constraints-max-nodes", "1")
    page.locator(f"input[name='constraints.gpus'][value='{H100}']").check()
    page.get_by_role("button", name="Find plans").click()
    page.wait_for_selector("#plan-table tbody tr")
    assert page.locator("#err-f-constraints-max-nodes").inner_text() == ""


def test_the_planner_works_without_javascript(make_context) -> None:  # type: ignore[no-untyped-def]
    page = make_context(java_script_enabled=False).new_page()
    page.goto("/plan")
    page.locator("label[for='f-training-method-lora']").click()
    page.locator(f"input[name='constraints.gpus'][value='{H100}']").check()
    page.fill("#f-constraints-max-nodes", "2")
    page.get_by_role("button", name="Find plans").click()
    page.wait_for_url(re.compile(r"/plan\?.*constraints\.max_nodes=2"))
    assert page.locator("#plan-table tbody tr").count() >= 2
    page.locator("#plan-table thead th[data-key='step'] a").click()  # sorts on the server
    page.wait_for_url(re.compile(r"sort=step&dir=asc"))
    steps = _column(page, "step")
    assert steps == sorted(steps)
    assert page.locator("#plan-table thead th[data-key='step']").get_attribute("aria-sort") == "ascending"


def test_a_large_search_shows_its_progress_then_the_plans(page) -> None:  # type: ignore[no-untyped-def]
    """A DeepSeek-V3 full fine-tune on H200 over 1..128 nodes (15,171 layouts): while the request runs, the busy
    line shows how far the search is and what the screen did (polled from /plan/progress); then the plans
    replace it."""
    page.goto("/plan")
    page.select_option("#f-model", "deepseek-v3")
    page.locator("label[for='f-training-method-full']").click()
    page.locator("input[name='constraints.gpus'][value='h200-sxm-141gb']").check()
    page.fill("#f-constraints-max-nodes", "128")
    page.evaluate("""() => {
      window.progressSeen = [];
      const out = document.getElementById('plan-progress');
      const busy = document.getElementById('plan-busy');
      new MutationObserver(() => window.progressSeen.push(
        [out.textContent, getComputedStyle(busy).display !== 'none'])
      ).observe(out, {childList: true, characterData: true, subtree: true});
    }""")
    page.get_by_role("button", name="Find plans").click()
    page.wait_for_selector("#plan-results #plan-table tbody tr", timeout=60_000)
    seen = page.evaluate("window.progressSeen")
    shown = [text for text, visible in seen if visible]
    progress = re.compile(r"^Searching [\d,]+ layouts… \d+% · [\d,]+ screened at once, [\d,]+ estimated exactly$")
    assert any(progress.match(text) for text in shown), seen
    assert not page.locator("#plan-busy").is_visible()  # the request is over: the line is gone
    assert "megatron" in page.locator("#plan-table tbody").inner_text().lower()  # EP needs Megatron: the MoE plans
