"""The measurement pages: our calibration records (custom model shapes, FSDP, LoRA, QLoRA, DDP) posted through
the API, listed, each opened, and each one's "open the estimate" link leads to an estimate page that shows it
beside the prediction (the page's request has the record's request key); another request shows none."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.check.record import calibration_records
from app.core.settings import Settings
from app.core.startup import load_source_catalog
from app.main import create_app
from app.repositories.api_keys import create_key

DATA = Path(__file__).parent / "data" / "calibration_h200.json"
LABELS = ("l1b-full-mixed-fused-b1-s4096-nock", "l8b-lora16al-fused-b1-s4096-ck",
          "l8b-full-mixed-fused-b1-s4096-ck-fsdp8", "l8b-qlora16al-fused-b1-s4096-ck",
          "l3b-full-mixed-fused-b1-s4096-ck-ddp8", "mx8x7b-lora16at-fused-b1-s2048-ck")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'capplan.db'}", allowed_hosts="*"))
    with TestClient(app) as client:
        with app.state.sessionmaker() as session:
            _row, key = create_key(session=session, name="pages")
            session.commit()
        yield client, key


def test_every_record_shows_beside_its_own_estimate(client: tuple[TestClient, str]) -> None:
    http, key = client
    records, _ = calibration_records(DATA, load_source_catalog())
    chosen = [r for r in records if r["label"] in LABELS]
    assert len(chosen) == len(LABELS)
    for rec in chosen:
        stored = http.post("/api/v1/measurements", json=rec, headers={"X-API-Key": key})
        assert stored.status_code == 201, stored.text
        mid = stored.json()["id"]
        page = http.get(f"/measurements/{mid}")
        assert page.status_code == 200 and rec["label"] in page.text
        link = re.search(r'href="(/estimate\?[^"]*)" id="measurement-estimate"', page.text)
        assert link, rec["label"]
        estimate = http.get(html.unescape(link.group(1)))
        assert estimate.status_code == 200
        assert "Measured on your hardware" in estimate.text and f'data-measurement="{mid}"' in estimate.text, (
            rec["label"])
    listing = http.get("/measurements").text
    assert all(label in listing for label in LABELS)
    other = http.get("/estimate?model=llama-3.2-1b&training.seq_len=1000")
    assert other.status_code == 200 and "measured-beside" not in other.text


@pytest.mark.parametrize("path", ["/measurements/999", "/measurements/0", "/measurements?page=0"])
def test_unknown_or_bad_pages_are_4xx(client: tuple[TestClient, str], path: str) -> None:
    http, _key = client
    assert http.get(path).status_code in (404, 422)
