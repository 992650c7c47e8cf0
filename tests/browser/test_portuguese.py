"""A whole session in Brazilian Portuguese (issue 17): the visible switch keeps the choice in a cookie, the form,
the estimate, compare, the planner, TCO, serving and the FAQ all in Portuguese, with no English UI text left,
numbers and money in the pt-BR format (``1.157 GiB``, ``US$ 9.075``) and the charts' labels translated.
Screenshots of each page go to the test's tmp_path."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

#: English page text that must not be left on a Portuguese page: UI labels and the estimator's own words
ENGLISH = (
    "Size a fine-tune", "Compare GPUs", "Saved quotes", "Serve it", "Does not fit", "Fits, tight", "Host RAM",
    "per GPU", "per node", "Warnings", "Assumptions", "Ways to make it fit", "Time to train", "Step time",
    "Memory per GPU", "Bill of materials", "Whole node", "Precision ", "Optimizer ", "Capacity:",
    "recommended by host sizing", "System memory", "Power at load", "the node needs", "Estimate serving",
    "Find plans", "Ranked plans", "Why this plan", "Ready-to-run configs", "Winner:", "Runner-up:",
    "It fits:", "Total cost of ownership", "Rack planning", "Upgrade A100", "Verdict:", "Cost per run",
    "Time to first token", "KV cache dtype", "Questions buyers ask", "Please check", "no catalog price",
    "trains in", "faster", "cheaper", "Cost basis", "every option",
)
PT_NUMBER = re.compile(r"\d{1,3}(?:\.\d{3})+(?:,\d+)? GiB")  # 1.157 GiB
PT_MONEY = re.compile(r"US\$\s?\d{1,3}(?:\.\d{3})*(?:,\d+)?")  # US$ 9.075, US$ 2,09
PLAN = ("/plan?model=llama-3.1-8b&training.method=lora&training.seq_len=4096&training.train_tokens=1e9"
        "&objective=time&constraints.gpus=h100-sxm5-80gb&constraints.gpus=a100-sxm4-80gb&constraints.max_nodes=2")


def _visible_text(page: Page) -> str:
    """The page's readable text (code blocks and the select lists of catalog names left out)."""
    return str(page.evaluate("""() => {
        const root = document.querySelector('main') || document.body;
        const copy = root.cloneNode(true);
        copy.querySelectorAll('pre, code, select, script, noscript, .sources, small.help a').forEach(n => n.remove());
        return copy.innerText;
    }"""))


def _assert_portuguese(page: Page, where: str, shots: Path) -> str:
    assert page.locator("html").get_attribute("lang") == "pt-BR", where
    text = _visible_text(page)
    left = [e for e in ENGLISH if e in text]
    assert left == [], f"English on the pt-BR page {where}: {left}"
    page.screenshot(path=str(shots / f"pt-{where.strip('/').split('?')[0] or 'home'}.png"), full_page=True)
    return text


def test_a_whole_session_in_brazilian_portuguese(make_context, tmp_path) -> None:  # type: ignore[no-untyped-def]
    context = make_context(locale="en-US", extra_http_headers={"Accept-Language": "en-US,en;q=0.9"})
    page = context.new_page()
    page.goto("/")
    assert page.locator("html").get_attribute("lang") == "en"
    page.locator("#lang-pt_BR").click()  # the visible switch
    page.wait_for_selector("#lang-en")
    assert {c["name"]: c["value"] for c in context.cookies()}.get("capplan_lang") == "pt_BR"
    _assert_portuguese(page, "/", tmp_path)

    # the form, filled as a buyer would: 70B full fine-tune with offload on a DGX A100 320GB
    page.select_option("#f-hardware-server", "nvidia-dgx-a100-320gb")
    expect(page.locator("#f-hardware-gpu")).to_have_value("a100-sxm4-40gb")
    page.locator("details.advanced > summary").click()
    page.locator("label[for='f-training-method-full']").click()
    page.select_option("#f-parallelism-sharding", "zero3")
    page.select_option("#f-parallelism-offload", "optimizer+params")
    page.select_option("#f-training-activation-checkpointing", "full")
    page.fill("#f-training-train-tokens", "1e9")
    page.get_by_role("button", name="Estimar").click()
    page.wait_for_selector("#result #chart-step-time .main-svg")
    text = _assert_portuguese(page, "/estimate", tmp_path)
    expect(page.locator("#node-verdict")).to_have_text("O host não comporta", use_inner_text=True)
    assert "precisa de 1.157 GiB de RAM do host por nó; este servidor tem 1.024 GiB" in \
        page.locator("#node-sentence").inner_text()
    assert PT_NUMBER.search(text) and PT_MONEY.search(page.locator("#kpi-cost").inner_text())
    assert "Premissas" in text and "Precisão bf16-mixed" in text  # the estimator's assumptions, translated
    chart = page.locator("#chart-step-time .main-svg").first.inner_html()
    assert "Transferências do offload para a CPU" in chart

    # compare, from the nav (the cookie carries the language)
    page.get_by_role("link", name="Comparar GPUs").first.click()
    page.wait_for_selector("h1")
    assert page.locator("h1").inner_text() == "Comparar GPUs e servidores"
    query = page.url.split("?", 1)[1] if "?" in page.url else ""
    page.goto(f"/compare?{query}&servers=nvidia-dgx-a100-320gb&servers=nvidia-dgx-h100")
    page.wait_for_selector("#node-compare, table")
    _assert_portuguese(page, "/compare", tmp_path)

    page.goto(PLAN)
    page.wait_for_selector("#plan-winner")
    text = _assert_portuguese(page, "/plan", tmp_path)
    assert "Vencedor:" in text and "Por que este plano" in text
    assert PT_MONEY.search(page.locator("#kpi-cost").inner_text())
    page.wait_for_selector("#chart-plan .main-svg")
    assert "Fronteira de Pareto" in page.locator("#chart-plan").inner_html()

    page.goto("/tco?up.current=nvidia-dgx-a100-640gb&up.candidate=nvidia-dgx-h100")
    page.wait_for_selector("#tco-title")
    text = _assert_portuguese(page, "/tco", tmp_path)
    assert PT_MONEY.search(page.locator("#kpi-capex").inner_text())
    assert "Veredito:" in page.locator("#upgrade-verdict").inner_text()
    page.wait_for_selector("#chart-tco .main-svg")
    assert "Custo total de propriedade" in page.locator("#chart-tco").inner_html()

    page.goto("/serve?model=llama-3.1-70b&gpu=h200-sxm-141gb&tp=8")
    page.wait_for_selector("#serve-memory")
    text = _assert_portuguese(page, "/serve", tmp_path)
    assert PT_MONEY.search(page.locator("#usd-out").inner_text())
    assert "Tempo até o primeiro token" in text

    page.goto("/faq")
    page.wait_for_selector("#faq-scratch")
    _assert_portuguese(page, "/faq", tmp_path)

    # back to English with the switch, on the same page
    page.locator("#lang-en").click()
    page.wait_for_selector("#lang-pt_BR")
    assert page.locator("html").get_attribute("lang") == "en"
