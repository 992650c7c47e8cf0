"""The "Serve it" page in a real browser: from a training estimate's "Serve it" link to the serving result with
the model and server filled in, the throughput-latency chart drawn by the vendored plotly, and a change of
tensor parallelism through the form."""

from __future__ import annotations

import re


def test_serve_it_from_a_training_estimate(page, traffic) -> None:  # type: ignore[no-untyped-def]
    page.goto("/estimate?model=llama-3.1-70b&hardware.server=dell-xe9680-h200&hardware.gpu=h200-sxm-141gb"
              "&training.method=lora")
    page.locator("#serve-link").click()
    page.wait_for_url(re.compile(r"/serve\?.*server=dell-xe9680-h200"))
    assert page.locator("#s-model").input_value() == "llama-3.1-70b"
    assert page.locator("#s-server").input_value() == "dell-xe9680-h200"
    # issue 28: "Serve it" opens on the smallest tensor parallelism that starts (70B in bf16 leaves one H200 no
    # room for the KV cache), and the command says so
    tp = int(page.locator("#s-tp").input_value())
    assert tp > 1
    assert page.locator("#starts-badge").inner_text() == "starts"
    assert f"--tensor-parallel-size {tp}" in page.locator("#serve-command").input_value()
    page.wait_for_selector("#chart-serving .main-svg")
    assert page.locator("#curve-table tbody tr").count() >= 5
    assert page.locator("#usd-out").inner_text().startswith("$")
    # on one GPU it does not start: vLLM's own refusal
    page.fill("#s-tp", "1")
    page.locator("#serve-submit").click()
    page.wait_for_url(re.compile(r"tp=1"))
    assert page.locator("#starts-badge").inner_text() == "will not start"
    assert "No available memory for the cache blocks" in page.locator("#serve-verdict").inner_text()
