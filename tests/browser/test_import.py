"""Bring your own config in the browser: paste an axolotl YAML on the home page, see the form filled from it, the
reading report (what was read, what capplan cannot represent) and the estimate."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect

AXOLOTL = (Path(__file__).parents[1] / "data" / "configs" / "axolotl" / "qlora-1b.yml").read_text()


def test_paste_an_axolotl_yaml(page, traffic) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    page.locator("#import-form summary").click()
    page.fill("#f-import-config", AXOLOTL)
    page.locator("#import-submit").click()
    page.wait_for_selector("#import-report")
    # the form, filled from the YAML (base_model NousResearch/Llama-3.2-1B, adapter qlora, micro_batch_size 2,
    # sequence_len 2048)
    assert page.locator("#f-model").input_value() == "llama-3.2-1b"
    expect(page.locator("#f-training-method-qlora")).to_be_checked()
    assert page.locator("#f-training-micro-batch-size").input_value() == "2"
    assert page.locator("#f-training-seq-len").input_value() == "2048"
    # the report: keys read and what they set, and what is not represented
    expect(page.locator("#import-read")).to_contain_text("base_model")
    expect(page.locator("#import-read")).to_contain_text("training.method = qlora")
    expect(page.locator("#import-not-represented")).to_contain_text("sample_packing")
    # the estimate, with its verdict and memory chart
    page.wait_for_selector("#result #chart-memory .main-svg")
    assert page.locator("#verdict").inner_text() in {"Fits", "Fits, tight", "At risk", "Does not fit"}
    assert "Llama 3.2 1B" in page.locator(".verdict-title").inner_text()


def test_a_broken_config_is_named_in_place(page, traffic) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    page.locator("#import-form summary").click()
    page.fill("#f-import-config", "base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: two\n")
    page.locator("#import-submit").click()
    expect(page.locator("#err-f-import-config")).to_contain_text("micro_batch_size")
