"""Issue 29 in a real browser, on the planner page: Llama 3.1 8B LoRA at 16k tokens on A100 40GB nodes. Without the
"Fine-tuning stack" toggle no plan changes the request's mechanisms; with "Fused loss" ticked the planner may use
Liger's / Cut Cross-Entropy's fused loss, and the rows that do say so with the GiB saved and the time cost (the
fused loss lets a smaller context-parallel group fit, which the planner ranks first)."""

from __future__ import annotations

import re

A100_40 = "a100-sxm4-40gb"


def _step_seconds(page) -> list[float]:  # type: ignore[no-untyped-def]
    index = page.locator("#plan-table thead th").evaluate_all("ths => ths.findIndex(th => th.dataset.key === 'step')")
    return page.locator("#plan-table tbody tr").evaluate_all(
        f"rows => rows.map(r => parseFloat(r.cells[{index}].dataset.v))")


def test_the_fused_loss_toggle_lets_the_planner_change_the_loss(page) -> None:  # type: ignore[no-untyped-def]
    page.goto("/plan")
    page.select_option("#f-model", "llama-3.1-8b")
    page.locator("label[for='f-training-method-lora']").click()
    page.fill("#f-training-seq-len", "16384")
    page.locator(f"input[name='constraints.gpus'][value='{A100_40}']").check()
    page.fill("#f-constraints-max-nodes", "1")
    assert not page.locator("#plan-stack").evaluate("d => d.open")  # closed until something is ticked
    page.get_by_role("button", name="Find plans").click()
    page.wait_for_selector("#plan-results #plan-table")
    assert page.locator("#plan-table .mechanism-changes").count() == 0
    plain_best = min(_step_seconds(page))

    page.locator("#plan-stack summary").click()
    page.locator("input[name='vary_mechanisms'][value='loss_kernel']").check()
    page.get_by_role("button", name="Find plans").click()
    page.wait_for_url(re.compile(r"/plan\?.*vary_mechanisms=loss_kernel"))
    page.wait_for_selector("#plan-table .mechanism-changes")
    first = page.locator("#plan-table tbody tr").first
    changed = first.locator(".mechanism-changes")
    text = changed.inner_text()
    assert "fused loss" in text
    saved = re.search(r"([\d.]+) GiB less per GPU, step time ([+-][\d.]+) s", text)
    assert saved is not None and float(saved.group(1)) > 0, text
    assert changed.get_attribute("data-changes") == '{"training.loss_kernel": "fused"}'
    assert _step_seconds(page)[0] < plain_best  # ranked by the planner's objective: faster than without it
    assert "Fine-tuning stack mechanisms searched" in page.locator("#plan-notes").inner_text()
    # the toggle stays ticked on the result page (the link is the same search)
    assert page.locator("input[name='vary_mechanisms'][value='loss_kernel']").is_checked()
