"""One honest cost in a real browser: the same LoRA job on owned A100, H100 and H200 servers has the same basis
(owned) and the same totals, to the cent, on /estimate, /compare, /plan (its layout opened in the estimator) and
/tco; each page names the basis, and an owned server never shows a rental price as its cost."""

from __future__ import annotations

from urllib.parse import urlencode

SERVERS = {"a100-sxm4-80gb": "nvidia-dgx-a100-640gb", "h100-sxm5-80gb": "nvidia-dgx-h100",
           "h200-sxm-141gb": "nvidia-dgx-h200"}
JOB = {"model": "llama-3.1-8b", "training.method": "lora", "training.seq_len": "4096",
       "training.train_tokens": "200000000", "hardware.num_nodes": "1", "hardware.gpus_per_node": "8"}


def _job(gpu: str) -> dict[str, str]:
    return {**JOB, "hardware.gpu": gpu, "hardware.server": SERVERS[gpu]}


def _cents(value: str | None) -> int:
    assert value is not None
    return round(float(value) * 100)


def _estimate(page, gpu: str) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    page.goto("/estimate?" + urlencode(_job(gpu)))
    kpi = page.locator("#kpi-cost")
    assert kpi.get_attribute("data-basis") == "own"
    assert page.locator("#cost-basis").inner_text().startswith("owned")
    assert "rented" not in kpi.inner_text()
    return _cents(kpi.get_attribute("data-usd")), float(kpi.get_attribute("data-rate") or 0)


def test_the_same_job_costs_the_same_on_every_page(page) -> None:  # type: ignore[no-untyped-def]
    estimate = {gpu: _estimate(page, gpu) for gpu in SERVERS}

    picks = "&".join(f"servers={s}" for s in SERVERS.values())
    page.goto(f"/compare?{urlencode(JOB)}&hardware.gpu=h100-sxm5-80gb&{picks}")
    assert "every option owned" in page.locator("#cost-basis").inner_text()
    for gpu, server in SERVERS.items():
        cell = page.locator(f"tr[data-option='{server}'] td.cost")
        assert cell.get_attribute("data-basis") == "own"
        assert _cents(cell.get_attribute("data-usd")) == estimate[gpu][0], gpu
        assert float(cell.get_attribute("data-rate") or 0) == estimate[gpu][1]

    for gpu, server in SERVERS.items():
        page.goto("/tco?" + urlencode({**_job(gpu), "server": server}))
        assert "Owned" in page.locator("#cost-basis").inner_text()
        own = page.locator("#job-runs tr[data-kind='own'] td.cost")
        assert _cents(own.get_attribute("data-usd")) == estimate[gpu][0], gpu
        assert float(own.get_attribute("data-rate") or 0) == estimate[gpu][1]

    ratios = {gpu: estimate[gpu][0] / estimate["a100-sxm4-80gb"][0] for gpu in SERVERS}
    for gpu, server in SERVERS.items():
        query = {**{k: v for k, v in _job(gpu).items() if not k.startswith("hardware.")},
                 "constraints.servers": server, "constraints.max_nodes": "1", "pricing": "owned"}
        page.goto("/plan?" + urlencode(query))
        kpi = page.locator("#kpi-cost")
        kpi.wait_for()
        assert kpi.get_attribute("data-basis") == "own"
        assert page.locator("#cost-basis").first.inner_text().startswith("owned")
        assert float(kpi.get_attribute("data-rate") or 0) == estimate[gpu][1]  # the same $/GPU-hour
        plan_total = _cents(kpi.get_attribute("data-usd"))
        page.locator("a", has_text="Open this layout in the estimator").first.click()
        page.wait_for_url("**/estimate?**")
        opened = page.locator("#kpi-cost")
        assert opened.get_attribute("data-basis") == "own"
        assert _cents(opened.get_attribute("data-usd")) == plan_total, gpu  # the plan's layout, to the cent
    assert ratios["h200-sxm-141gb"] != 1.0  # the three servers are priced apart, not one number everywhere
