"""A Portuguese quote's serving line is Portuguese (review leftover of issue 28): the print view and the PDF of a
quote saved with training and serving, read back as text, carry no English label or sentence of the serving
lines. The English wording is taken from the same quote rendered in English (its labels, and every run of two or
more words between the numbers and catalog names of its values), so a line added later in English is caught too.
The one English text left is the engine's own start-up error, quoted as vLLM / PyTorch print it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from html import unescape

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.main import create_app

SAME_ORIGIN = {"Origin": "http://testserver"}
JOB = "model=llama-3.1-8b&training.method=lora&hardware.server=dell-xe9680-h200&hardware.gpu=h200-sxm-141gb"
STARTS = "model=llama-3.1-8b&server=dell-xe9680-h200&input_tokens=2048&output_tokens=512"
WONT_START = "model=llama-3.1-70b&gpu=l40s-48gb&tp=1"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("quote-serving") / "q.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_writes="100000/minute", rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


def _save(client: TestClient, serve_query: str) -> str:
    saved = client.post("/quotes", data={"query": JOB, "serve_query": serve_query, "name": "train + serve",
                                         "customer": "ACME", "price": "1000"},
                        headers=SAME_ORIGIN, follow_redirects=False)
    assert saved.status_code == 303, saved.text[:800]
    return saved.headers["location"].split("?")[0].rstrip("/").rsplit("/", 1)[1]


def _text(cell: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", cell))).strip()


def _serving_rows(html: str) -> tuple[str, str | None, list[tuple[str, str]]]:
    """The serving section: its heading, the next section's heading and its rows (the print view's sections are
    headed by <h2>, each followed by its table; the serving one holds the engine line)."""
    headings = [_text(h) for h in re.findall(r"<h2>(.*?)</h2>", html, re.S)]
    sections = re.findall(r"<h2>(.*?)</h2>\s*<table[^>]*>(.*?)</table>", html, re.S)
    found = [(_text(h), [(_text(a), _text(b)) for a, b in
                         re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", body, re.S)]) for h, body in sections]
    serving = [(h, rows) for h, rows in found if any("vLLM" in v or "SGLang" in v for _, v in rows)]
    assert len(serving) == 1, headings
    heading, rows = serving[0]
    after = headings.index(heading) + 1
    return heading, headings[after] if after < len(headings) else None, rows


def _english(rows: list[tuple[str, str]], names: list[str]) -> tuple[set[str], set[str]]:
    """The English labels, and the runs of two or more words of the values once numbers, money, the catalog's
    names and the engine's quoted errors are taken out."""
    labels = {label for label, _ in rows}
    runs: set[str] = set()
    for _, value in rows:
        for name in sorted(names, key=len, reverse=True):
            value = value.replace(name, "|")
        for piece in re.split(r"[|\d±%$()+:;,.]+|\bUS\b|\bvLLM\b|\bbf16\b|\bauto\b|\bfp8\b|\bx\b", value):
            words = re.findall(r"[A-Za-z][A-Za-z'/-]*", piece)
            if len(words) >= 2:
                runs.add(" ".join(words))
    return labels, runs


@pytest.mark.parametrize("serve_query", [STARTS, WONT_START], ids=["starts", "does-not-start"])
def test_a_portuguese_quote_has_no_english_serving_line(client: TestClient, serve_query: str) -> None:
    from app.exports.quote import display_names, named
    from hardware_catalog import load_catalog

    qid = _save(client, serve_query)
    names = display_names(load_catalog())
    errors = [named(str(e), names) for e in
              client.get(f"/api/v1/quotes/{qid}").json()["revision"]["serving_result"].get("errors", [])]
    assert bool(errors) == (serve_query == WONT_START)
    _, _, english = _serving_rows(client.get(f"/api/v1/quotes/{qid}/print").text)
    heading, following, portuguese = _serving_rows(client.get(f"/api/v1/quotes/{qid}/print?lang=pt_BR").text)
    assert len(portuguese) == len(english) >= 3
    labels, runs = _english(english, [*errors, *names.values()])
    assert runs, "the English serving values have words to look for"
    pt_labels = {label for label, _ in portuguese}
    assert not labels & pt_labels, f"English serving labels on the pt-BR quote: {labels & pt_labels}"
    pt_text = " ".join(f"{a} {b}" for a, b in portuguese)
    for error in errors:
        pt_text = pt_text.replace(error, "|")
    left = sorted(r for r in runs if r in " ".join(re.findall(r"[A-Za-z][A-Za-z'/-]*", pt_text)))
    assert left == [], f"English serving wording on the pt-BR quote: {left}"

    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext (poppler-utils) is not installed")
    body = client.get(f"/api/v1/quotes/{qid}.pdf?lang=pt_BR").content
    text = subprocess.run(["pdftotext", "-raw", "-", "-"], input=body, capture_output=True, check=True).stdout.decode()
    assert heading in text, "the PDF has the Portuguese serving section"
    text = text[text.index(heading) + len(heading):]  # the serving section of the PDF, to the next heading
    text = text[:text.index(following)] if following and following in text else text
    flat = " ".join(re.findall(r"[A-Za-z][A-Za-z'/-]*", re.sub(r"\s+", " ", text)))
    for error in errors:
        flat = flat.replace(" ".join(re.findall(r"[A-Za-z][A-Za-z'/-]*", error)), "|")
    assert all(label.split()[0] in text for label in pt_labels), "the PDF carries the Portuguese serving line"
    left = sorted(label for label in labels if re.search(rf"(?m)^{re.escape(label)}\b", text))
    left += sorted(r for r in runs if r in flat)
    assert left == [], f"English serving wording in the pt-BR PDF: {left}"
