"""English and Brazilian Portuguese pages (Babel catalogs, Jinja2 i18n): every page message has a pt-BR
translation, the locale comes from the cookie or Accept-Language, numbers and money follow the locale, and the
API's problem details stay English."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po
from fastapi.testclient import TestClient

from app.core.i18n import COOKIE, _accept_language
from app.core.settings import Settings
from app.main import create_app

ROOT = Path(__file__).resolve().parents[1]
PO = ROOT / "app" / "locale" / "pt_BR" / "LC_MESSAGES" / "messages.po"
DGX320 = ("/estimate?model=llama-3.1-70b&training.method=full&training.activation_checkpointing=full"
          "&parallelism.sharding=zero3&parallelism.offload=optimizer%2Bparams&hardware.gpu=a100-sxm4-40gb"
          "&hardware.server=nvidia-dgx-a100-320gb")


def _extracted() -> set[str]:
    method_map, options_map = parse_mapping_cfg(io.StringIO((ROOT / "babel.cfg").read_text()))
    keywords = {"_": None, "gettext": None, "ngettext": (1, 2), "N_": None, "_gettext": None, "Text": None}
    found = set()
    for _filename, _lineno, message, _comments, _context in extract_from_dir(
            str(ROOT), method_map, options_map, keywords=keywords):
        found.add(message[0] if isinstance(message, tuple) else message)
    return found


def test_every_page_message_has_a_pt_br_translation() -> None:
    extracted = _extracted()
    assert len(extracted) > 200, "the extraction found the marked messages"
    with PO.open("rb") as f:
        catalog = read_po(f, locale="pt_BR")
    translated = {}
    for m in catalog:
        if not m.id:
            continue
        key = m.id[0] if isinstance(m.id, tuple) else m.id
        strings = m.string if isinstance(m.string, tuple) else (m.string,)
        translated[key] = not m.fuzzy and all(s.strip() for s in strings)
    missing = sorted(k for k in extracted if not translated.get(k))
    assert missing == [], f"untranslated in pt-BR (run scripts/i18n-update, then translate): {missing}"


def test_placeholders_survive_translation() -> None:
    with PO.open("rb") as f:
        catalog = read_po(f, locale="pt_BR")
    for m in catalog:
        if not m.id:
            continue
        ids = m.id if isinstance(m.id, tuple) else (m.id,)
        strings = m.string if isinstance(m.string, tuple) else (m.string,)
        pattern = r"%\(\w+\)[sd]|\{\w+\}"
        want = set(re.findall(pattern, ids[-1]))
        for s in strings:
            assert set(re.findall(pattern, s)) == want, (m.id, s)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("i18n") / "i18n.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


def test_accept_language_picks_portuguese_and_formats_numbers_and_money(client: TestClient) -> None:
    page = client.get(DGX320, headers={"Accept-Language": "pt-BR,pt;q=0.9,en;q=0.5"})
    assert page.headers["content-language"] == "pt-BR" and '<html lang="pt-BR">' in page.text
    assert "As GPUs comportam, o host não: precisa de 1.157 GiB de RAM do host por nó; este servidor tem 1.024 GiB" \
        in page.text
    assert ">Estimar</button>" in page.text and "US$" in page.text
    english = client.get(DGX320, headers={"Accept-Language": "en-US"})
    assert "needs 1,157 GiB of host RAM per node; this server has 1,024 GiB" in english.text
    assert '<html lang="en">' in english.text


def test_form_errors_are_translated_and_the_api_stays_english(client: TestClient) -> None:
    page = client.get("/estimate?training.seq_len=lots", headers={"Accept-Language": "pt-BR"})
    assert page.status_code == 422 and "Digite um número inteiro" in page.text
    assert "Enter a whole number" in client.get("/estimate?training.seq_len=lots").text


def test_the_switch_keeps_the_choice_in_a_cookie_and_returns_to_the_page(client: TestClient) -> None:
    r = client.get("/lang/pt_BR?next=/compare", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/compare"
    assert f"{COOKIE}=pt_BR" in r.headers["set-cookie"]
    client.cookies.clear()
    page = client.get("/", headers={"Accept-Language": "en", "Cookie": f"{COOKIE}=pt_BR"})
    assert "Dimensionar um fine-tuning" in page.text and 'id="lang-en"' in page.text
    assert client.get("/lang/pt_BR?next=//evil.example", follow_redirects=False).headers["location"] == "/"
    assert "set-cookie" not in client.get("/lang/xx?next=/", follow_redirects=False).headers
    client.cookies.clear()


def test_api_error_detail_stays_english(client: TestClient) -> None:
    r = client.post("/api/v1/estimates", json={"training": {"seq_len": 0}},
                    headers={"Accept-Language": "pt-BR", "Cookie": f"{COOKIE}=pt_BR"})
    assert r.status_code == 422
    body = r.json()
    assert body["detail"].endswith("invalid field(s): training.seq_len")
    assert "greater than or equal" in body["errors"][0]["detail"]


@pytest.mark.parametrize(("header", "first"), [
    ("pt-BR,pt;q=0.9,en;q=0.8", "pt_BR"), ("en;q=0.5, pt-BR", "pt_BR"), ("de, en;q=0.1", "de"), ("", None),
])
def test_accept_language_order(header: str, first: str | None) -> None:
    tags = _accept_language(header)
    assert (tags[0] if tags else None) == first


# --- the estimator's messages on the pages ---------------------------------------------------------------------

#: pages that show the estimator's warnings, assumptions, suggestions, host sizing, BOM, plan explanations, TCO
#: verdicts and serving notes (an OOM case, a multi-node offload case, the planner, TCO with the upgrade, serving)
MESSAGE_PAGES = (
    DGX320,
    "/estimate?model=llama-3.1-70b&training.method=full&hardware.gpu=a100-sxm4-40gb&hardware.num_nodes=1",
    "/estimate?model=llama-3.1-70b&training.method=full&training.activation_checkpointing=full"
    "&parallelism.sharding=zero3&parallelism.offload=optimizer&hardware.gpu=h100-sxm5-80gb"
    "&hardware.server=nvidia-dgx-h100&hardware.num_nodes=2&training.train_tokens=1e9",
    "/plan?model=llama-3.1-8b&training.method=lora&training.seq_len=4096&training.train_tokens=1e9&objective=time"
    "&constraints.gpus=h100-sxm5-80gb&constraints.gpus=a100-sxm4-80gb&constraints.max_nodes=2",
    "/plan?model=llama-3.1-70b&training.method=lora&training.train_tokens=1e9&constraints.gpus=h100-sxm5-80gb"
    "&constraints.max_nodes=1&question=fewest-gpus",
    "/tco?server=dell-xe9680-h100&model=llama-3.1-8b&training.method=full&training.train_tokens=1e9"
    "&up.current=nvidia-dgx-a100-640gb&up.candidate=nvidia-dgx-h100",
    "/serve?model=llama-3.1-70b&gpu=a100-sxm4-80gb&tp=8&weights=fp8&kv_cache_dtype=fp8&concurrency=100000",
    "/compare?model=llama-3.1-70b&training.method=full&training.activation_checkpointing=full"
    "&parallelism.sharding=zero3&parallelism.offload=optimizer%2Bparams&servers=nvidia-dgx-a100-320gb"
    "&servers=nvidia-dgx-h100&gpus=a100-sxm4-40gb",
)


def _estimator_templates() -> list[str]:
    """Every ``Text(...)`` / ``N_(...)`` message of the estimator, as pybabel extracts it (babel.cfg)."""
    method_map = [("estimator/**.py", "python")]
    found = set()
    for _filename, _lineno, message, _comments, _context in extract_from_dir(
            str(ROOT), method_map, {}, keywords={"Text": None, "N_": None}):
        found.add(message[0] if isinstance(message, tuple) else message)
    return sorted(found)


def _english_fragments(template: str, translation: str) -> list[str]:
    """The literal runs of a template that give it away in English: two words or more, not kept as they are in
    its translation (a product name, a command line or a paper title may be)."""
    parts = [p.strip(" .,;:()") for p in re.split(r"%\(\w+\)[sd]|%%", template)]
    return [p for p in parts if len(p.split()) >= 2 and len(p) >= 7 and p not in translation]


def _page_text(html: str) -> str:
    body = html.split("<body", 1)[-1]
    body = re.sub(r"<script\b.*?</script>", " ", body, flags=re.S)  # chart JSON is checked apart
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))


def test_the_estimator_messages_are_marked_and_translated() -> None:
    templates = _estimator_templates()
    assert len(templates) > 200, "estimator messages are written as Text(template, ...) and extracted"
    with PO.open("rb") as f:
        catalog = read_po(f, locale="pt_BR")
    missing = [t for t in templates if t not in catalog or not catalog[t].string]
    assert missing == []


@pytest.mark.parametrize("path", MESSAGE_PAGES)
def test_no_estimator_message_is_left_in_english_on_a_portuguese_page(client: TestClient, path: str) -> None:
    english = client.get(path, headers={"Accept-Language": "en"})
    page = client.get(path, headers={"Accept-Language": "pt-BR"})
    assert english.status_code == page.status_code == 200
    with PO.open("rb") as f:
        catalog = read_po(f, locale="pt_BR")
    text_en, text_pt = _page_text(english.text), _page_text(page.text)
    shown, left = 0, []
    for template in _estimator_templates():
        entry = catalog[template]
        translation = entry.string if entry is not None and isinstance(entry.string, str) else ""
        fragments = _english_fragments(template, translation)
        if any(f in text_en for f in fragments):
            shown += 1
            left += [f for f in fragments if f in text_pt]
    assert shown >= 1, "the English page shows some estimator message (else this check tests nothing)"
    assert left == [], f"English estimator text on the pt-BR page {path}: {left}"


def test_numbers_money_and_clauses_of_a_message_follow_the_locale() -> None:
    from app.core import i18n
    from estimator.messages import Money, Num, Text, join

    message = join([Text("Host RAM: the node needs %(gib)s GiB, more than it can hold (%(limit)s). Offload less, "
                         "shard over more nodes, or load the model on the meta device.", gib=Num(1157.4, ",.0f"),
                         limit=Text("the %(server)s takes at most %(gib)s GiB", server="DGX A100",
                                    gib=Num(1024, ",.0f"))),
                    Text("within the deadline the cheapest costs %(usd)s (%(on)s)", usd=Money(9075.4), on="1x8")])
    assert message == ("Host RAM: the node needs 1,157 GiB, more than it can hold (the DGX A100 takes at most 1,024 "
                       "GiB). Offload less, shard over more nodes, or load the model on the meta device. within the "
                       "deadline the cheapest costs $9,075 (1x8)")
    token = i18n._current.set("pt_BR")
    try:
        shown = i18n.translate(message)
    finally:
        i18n._current.reset(token)
    assert shown.startswith("RAM do host: o nó precisa de 1.157 GiB, mais do que comporta (o DGX A100 aceita no "
                            "máximo 1.024 GiB).")
    assert shown.endswith("dentro do prazo o mais barato custa US$\xa09.075 (1x8)") or \
        shown.endswith("dentro do prazo o mais barato custa US$ 9.075 (1x8)")
