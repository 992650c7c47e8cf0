"""app/formatting.py (Babel): the issue's examples -- negative money as "-$2.09", counts as whole numbers, a
single price not shown as a range -- and the pages use it (the TCO page's labels and headline)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.core.settings import Settings
from app.formatting import count, money, money_range, percent, price, rate
from app.main import create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("formatting") / "pages.db"
    with TestClient(create_app(Settings(database_url=f"sqlite:///{db}"))) as client:
        yield client


@pytest.mark.parametrize(("value", "text"), [(-2.09, "-$2.09"), (-9075.4, "-$9,075"), (0.08, "$0.08"),
                                             (2.0, "$2.00"), (1_234_567.8, "$1,234,568"), (None, "n/a"),
                                             (float("nan"), "n/a")])
def test_money(value: float | None, text: str) -> None:
    assert money(value) == text


def test_counts_percent_rates_prices_and_ranges() -> None:
    assert count(32_791.5) == "32,792" and count(7) == "7"
    assert percent(0.8) == "80%" and percent(0.125, 1) == "12.5%"
    assert rate(2.2345) == "$2.23" and rate(-2.09) == "-$2.09"
    assert price(399_999.99) == "$399,999.99" and price(1200, "EUR") == "€1,200.00"
    assert money_range(15_000, 15_000) == "$15,000" and money_range(8_000, 15_000) == "$8,000-$15,000"
    assert money_range(None, 15_000) == "$15,000"


def test_the_tco_page_speaks_in_display_names_within_the_horizon(client: TestClient) -> None:
    html = client.get("/tco?server=nvidia-dgx-h100").text
    verdict = re.search(r'id="tco-verdict">(.*?)</p>', html, re.S)
    assert verdict is not None
    words = " ".join(verdict.group(1).split())
    assert re.search(r"(Renting|Owning) .* is cheaper (over \d+ years|than owning)", words), words
    assert "-h100" not in words and "coreweave-" not in words and "aws-" not in words  # no ids
    assert "(on-demand) (on-demand)" not in html and "$-" not in html
    assert not re.search(r"\d,\d{3}\.\d runs", html)  # counts are whole
