"""Quotes that carry a serving line: the inference request and its result stored beside the training estimate,
re-computed with it, and in every export; quotes without one read and export exactly as before."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem
from tests.api.test_quotes import QUOTE, URL

INPUTS = {"model": "llama-3.2-1b", "hardware": {"server": "dell-xe9680-h100", "gpu": "h100-sxm5-80gb"}}
QUOTE = {**QUOTE, "inputs": INPUTS, "chosen_option": "dell-xe9680-h100"}

pytestmark = BOTH_BACKENDS

SERVING = {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm5-80gb", "server": "dell-xe9680-h100"},
           "workload": {"input_tokens": 512, "output_tokens": 128}}


@pytest.fixture
def catalog() -> Any:  # the serving cost needs the real catalog's prices and TCO defaults
    from hardware_catalog import load_catalog

    return load_catalog()


def _save(client: TestClient, auth: dict[str, str], **changes: Any) -> dict[str, Any]:
    r = client.post(URL, json={**QUOTE, **changes}, headers=auth)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_serving_line_is_stored_with_its_result(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth, serving=SERVING)
    rev = saved["revision"]
    assert rev["serving_inputs"]["workload"]["input_tokens"] == 512
    assert rev["serving_inputs"]["engine"] == "vllm"  # defaults stored explicitly, as for the training inputs
    served = client.post("/api/v1/inference-estimates", json=SERVING).json()
    assert rev["serving_result"] == served  # the same answer the inference endpoint gives
    assert rev["serving_result"]["cost"]["usd_per_million_output_tokens"] > 0
    assert rev["serving_result"]["speed"]["output_tokens_per_s_per_node"] > 0
    assert client.get(f"{URL}/{saved['id']}").json() == saved


def test_a_quote_without_a_serving_line_reads_as_before(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth)
    assert (saved["revision"]["serving_inputs"], saved["revision"]["serving_result"]) == (None, None)
    rows = dict(csv.reader(io.StringIO(client.get(f"{URL}/{saved['id']}.csv").text)))
    assert not [k for k in rows if k.startswith("serving")]
    assert "Serving the model" not in client.get(f"{URL}/{saved['id']}/print").text


def test_bad_serving_line_is_422_naming_the_field(client: TestClient, auth: dict[str, str]) -> None:
    bad = {**SERVING, "serving": {"tensor_parallel_size": 0}}
    assert_problem(client.post(URL, json={**QUOTE, "serving": bad}, headers=auth), 422,
                   "serving.serving.tensor_parallel_size")
    unknown = {**SERVING, "hardware": {"gpu": "nope"}}
    assert_problem(client.post(URL, json={**QUOTE, "serving": unknown}, headers=auth), 422, "serving.hardware.gpu")


def test_recompute_recomputes_and_keeps_the_serving_line(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth, serving=SERVING)
    r = client.post(f"{URL}/{saved['id']}/recompute", headers=auth)
    assert r.status_code == 200, r.text
    new = r.json()["saved"]["revision"]
    assert new["number"] == 2
    assert new["serving_inputs"] == saved["revision"]["serving_inputs"]
    assert new["serving_result"]["cost"] == saved["revision"]["serving_result"]["cost"]
    first = client.get(f"{URL}/{saved['id']}", params={"revision": 1}).json()["revision"]
    assert first["serving_result"] == saved["revision"]["serving_result"]  # the old revision is kept as it was


def test_exports_carry_the_serving_line(client: TestClient, auth: dict[str, str]) -> None:
    saved = _save(client, auth, serving=SERVING)
    rows = dict(csv.reader(io.StringIO(client.get(f"{URL}/{saved['id']}.csv").text)))
    cost = saved["revision"]["serving_result"]["cost"]
    assert float(rows["serving_result.cost.usd_per_million_output_tokens"]) == cost["usd_per_million_output_tokens"]
    assert rows["serving_inputs.workload.output_tokens"] == "128"
    doc = client.get(f"{URL}/{saved['id']}.json").json()
    assert doc["revisions"][0]["serving_result"]["cost"] == cost
    page = client.get(f"{URL}/{saved['id']}/print").text
    assert "Serving the model on the node" in page and "Price per million tokens" in page
    assert "Yearly capacity of the node" in page
