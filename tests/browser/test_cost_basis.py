"""One honest cost in a real browser: the same LoRA job on owned A100, H100 and H200 servers has the same basis
(owned) and the same totals, to the cent, on /estimate, /compare, /plan (the user's own layout as a row beside the
planner's winner, each opening its estimate) and /tco; each page names the basis, and an owned server never shows
a rental price as its cost. The cost settings (``cost.*``) round-trip through the URL and price every page alike."""

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
        cell = page.locator(f"tr[data-option='{server}'][data-layout='yours'] td.cost")
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
    for gpu in SERVERS:
        _plan_from_the_estimate(page, gpu, estimate[gpu])
    assert ratios["h200-sxm-141gb"] != 1.0  # the three servers are priced apart, not one number everywhere


def _plan_from_the_estimate(page, gpu: str, estimate: tuple[int, float], extra: str = "") -> None:  # type: ignore[no-untyped-def]
    """/estimate -> "See the ranked plans" -> /plan: the user's own layout is a row of its own, priced to the cent
    as on /estimate, beside the planner's winner on the same basis and rate; each row opens its own estimate,
    which shows the same total."""
    page.goto("/estimate?" + urlencode(_job(gpu)) + extra)
    page.locator("#layout-plan-link").click()
    page.wait_for_url("**/plan?**")
    assert "pricing=owned" in page.url  # the estimate owns its server, so the plan does too
    mine = page.locator("#pve-estimate td.cost")
    mine.wait_for()
    assert mine.get_attribute("data-basis") == "own"
    assert _cents(mine.get_attribute("data-usd")) == estimate[0], gpu  # your layout, to the cent
    assert float(mine.get_attribute("data-rate") or 0) == estimate[1]
    best = page.locator("#pve-plan td.cost")
    kpi = page.locator("#kpi-cost")
    assert best.get_attribute("data-basis") == kpi.get_attribute("data-basis") == "own"
    assert page.locator("#cost-basis").first.inner_text().startswith("owned")
    assert float(best.get_attribute("data-rate") or 0) == float(kpi.get_attribute("data-rate") or 0) == estimate[1]
    plan_total = _cents(best.get_attribute("data-usd"))
    assert _cents(kpi.get_attribute("data-usd")) == plan_total
    assert "rented" not in page.locator("#plan-vs-estimate").inner_text()
    page.locator("#pve-plan-link").click()
    page.wait_for_url("**/estimate?**")
    assert _cents(page.locator("#kpi-cost").get_attribute("data-usd")) == plan_total, gpu  # the winner's estimate
    page.go_back()
    page.locator("#pve-estimate-link").click()
    page.wait_for_url("**/estimate?**")
    assert _cents(page.locator("#kpi-cost").get_attribute("data-usd")) == estimate[0], gpu  # and yours


SETTINGS = {"cost.utilisation": "0.5", "cost.pue": "1.4", "cost.electricity_usd_per_kwh": "0.2"}


def test_cost_settings_round_trip_and_price_every_page_alike(page) -> None:  # type: ignore[no-untyped-def]
    """The cost settings typed into /estimate's advanced section reach the URL, come back in the form, and price
    /compare, /tco and /plan (the user's layout) the same, to the cent; a bad value is a form error."""
    gpu = "h200-sxm-141gb"
    page.goto("/estimate?" + urlencode(_job(gpu)))
    default = _cents(page.locator("#kpi-cost").get_attribute("data-usd"))
    page.locator("details.advanced").evaluate("d => { d.open = true; }")  # the cost settings are advanced
    for name, value in SETTINGS.items():
        page.fill(f"#f-{name.replace('.', '-').replace('_', '-')}", value)
    page.locator("#estimate-form button[type=submit]").click()
    page.wait_for_url("**cost.pue=1.4**")
    for name, value in SETTINGS.items():
        assert f"{name}={value}" in page.url
    page.reload()
    for name, value in SETTINGS.items():
        assert page.input_value(f"#f-{name.replace('.', '-').replace('_', '-')}") == value  # back in the form
    kpi = page.locator("#kpi-cost")
    total, rate = _cents(kpi.get_attribute("data-usd")), float(kpi.get_attribute("data-rate") or 0)
    assert total != default and "50% utilisation" in page.locator("#cost-basis").inner_text()

    page.goto(f"/compare?{urlencode({**JOB, **SETTINGS})}&hardware.gpu={gpu}&servers={SERVERS[gpu]}")
    assert page.input_value("#f-cost-utilisation") == "0.5"  # the compare form shows the settings
    cell = page.locator(f"tr[data-option='{SERVERS[gpu]}'][data-layout='yours'] td.cost")
    assert _cents(cell.get_attribute("data-usd")) == total

    page.goto("/tco?" + urlencode({**_job(gpu), **SETTINGS, "server": SERVERS[gpu]}))
    own = page.locator("#job-runs tr[data-kind='own'] td.cost")
    assert _cents(own.get_attribute("data-usd")) == total
    assert page.input_value("#f-a-utilisation") == "0.5"

    _plan_from_the_estimate(page, gpu, (total, rate), "&" + urlencode(SETTINGS))
    page.go_back()
    page.go_back()
    assert page.input_value("#f-cost-utilisation") == "0.5"  # the plan form carries the settings too

    page.goto("/estimate?" + urlencode(_job(gpu)) + "&cost.utilisation=7&cost.basis=lease")
    assert "Must be at most 1" in page.locator("#err-f-cost-utilisation").inner_text()
    assert page.locator("#err-f-cost-basis").inner_text().startswith("Choose one of")
    page.goto(f"/compare?{urlencode(JOB)}&hardware.gpu={gpu}&cost.pue=9")
    assert "Must be at most 3" in page.locator("#err-f-cost-pue").inner_text()
    page.goto("/plan?" + urlencode({"model": "llama-3.1-8b", "cost.utilisation": "x", "pricing": "owned"}))
    assert page.locator("#err-f-cost-utilisation").inner_text().startswith("Enter a number")
