"""Issue 29 in a real browser: Llama 3.1 8B LoRA at 16k tokens with full checkpointing on one A100 40GB does not fit
with the materialised loss (Hugging Face's fp32 logits, 23.5 GiB at 16k x 128,256); the ways out offer a fused loss
with the GiB it saves and its step-time cost, and the page it links to (the same job with
training.loss_kernel=fused) fits."""

from __future__ import annotations

import re

from playwright.sync_api import expect


def test_the_fused_loss_suggestion_makes_the_job_fit(page) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    page.select_option("#f-model", "llama-3.1-8b")
    page.locator("label[for='f-training-method-lora']").click()
    page.select_option("#f-hardware-gpu", "a100-sxm4-40gb")
    page.locator("details.advanced").evaluate("d => { d.open = true; }")
    page.fill("#f-hardware-gpus-per-node", "1")
    page.fill("#f-training-seq-len", "16384")
    page.select_option("#f-training-activation-checkpointing", "full")
    expect(page.locator("#f-training-loss-kernel")).to_have_value("")  # the stack's default: materialised
    page.get_by_role("button", name="Estimate").click()
    page.wait_for_selector("#result #chart-memory .main-svg")
    assert page.locator("#verdict").inner_text() == "Does not fit"

    way = page.locator("#ways-table tbody tr", has_text="fused loss").first
    expect(way).to_be_visible()
    text = way.inner_text()
    saved = re.search(r"([\d.]+) GiB less per GPU, step time ([+-][\d.]+) s", text)
    assert saved is not None, text
    assert float(saved.group(1)) > 10  # the fp32 logits and their gradient gone
    assert "fits" in text and "does not fit" not in text

    way.locator("a.way-out").click()
    page.wait_for_url(re.compile(r"/estimate\?.*training\.loss_kernel=fused"))
    page.wait_for_selector("#result #chart-memory .main-svg")
    assert page.locator("#verdict").inner_text() in {"Fits", "Fits, tight", "At risk"}
    assert page.locator("#f-training-loss-kernel").input_value() == "fused"
