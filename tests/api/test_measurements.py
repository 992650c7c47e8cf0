"""Measurements: store a measured record (API key needed), read it back unchanged, list and filter, bad records
are 422s naming the field (examples, and hypothesis-drawn bad figures), and no route alters a stored record.
The database starts with the records capplan ships (seeded like the catalog: app/services/measurements.py), so
counts are taken against what was stored before the test posted anything."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.schemas.measurement import request_key
from app.services.measurements import shipped_measurements
from estimator import EstimateRequest
from tests.api.conftest import BOTH_BACKENDS
from tests.api.problems import assert_problem

pytestmark = BOTH_BACKENDS

URL = "/api/v1/measurements"
REQUEST = {"model": "llama-3.2-1b", "hardware": {"gpu": "a100-sxm4-80gb"}}
RECORD: dict[str, Any] = {
    "kind": "run", "request": REQUEST, "label": "1B on one A100", "gpu_name": "NVIDIA A100-SXM4-80GB",
    "versions": {"torch": "2.13.0+cu130", "transformers": "5.24.0", "peft": "0.21.2", "cuda": "13.0",
                 "driver": "580.159.04"},
    "measured": {"peak_allocated_bytes": 32_224_218_112, "peak_reserved_bytes": 33_317_453_824,
                 "nvml_used_bytes": 34_121_515_008, "step_time_s": 0.108, "tokens_per_s": 37930.5},
    "estimated": {"peak_allocated_bytes": 31_000_000_000, "step_time_s": 0.1,
                  "parts_bytes": {"parameters": 4_943_257_600, "activations": 9_000_000_000},
                  "unrepresented": {"fused_kernels": "the trace sees no kernel workspace"}},
}


def _post(client: TestClient, auth: dict[str, str], record: dict[str, Any] = RECORD) -> dict[str, Any]:
    r = client.post(URL, json=record, headers=auth)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def _total(client: TestClient, **params: str) -> int:
    total: int = client.get(URL, params=params).json()["total"]
    return total


@pytest.fixture
def seeded(client: TestClient) -> int:
    """How many measurements the fresh database holds: the shipped records, every one of them seeded."""
    count = _total(client)
    assert count == len(shipped_measurements()) > 0
    return count


def test_a_stored_measurement_reads_back_as_posted(client: TestClient, auth: dict[str, str]) -> None:
    saved = _post(client, auth)
    assert saved["request"]["training"]["seq_len"] == 4096  # defaults stored explicitly
    assert saved["request_key"] == request_key(EstimateRequest.model_validate(REQUEST))
    assert saved["measured"]["peak_allocated_bytes"] == 32_224_218_112
    assert saved["measured"]["step_time_s"] == 0.108
    assert saved["estimated"]["parts_bytes"] == {"parameters": 4_943_257_600, "activations": 9_000_000_000}
    assert saved["estimated"]["unrepresented"]["fused_kernels"].startswith("the trace")
    assert saved["versions"]["peft"] == "0.21.2" and saved["versions"]["capplan"] is None
    assert (saved["kind"], saved["label"], saved["model"], saved["created_by"]) == (
        "run", "1B on one A100", "llama-3.2-1b", "test-tool")
    assert client.get(f"{URL}/{saved['id']}").json() == saved


def test_equal_requests_written_differently_share_a_key(client: TestClient, auth: dict[str, str]) -> None:
    a = _post(client, auth)
    b = _post(client, auth, {**RECORD, "request": {**REQUEST, "training": {"seq_len": 4096}}})
    c = _post(client, auth, {**RECORD, "request": {**REQUEST, "training": {"seq_len": 2048}}})
    assert a["request_key"] == b["request_key"] != c["request_key"]
    listed = client.get(URL, params={"request_key": a["request_key"]}).json()
    assert [m["id"] for m in listed["items"]] == [b["id"], a["id"]] and listed["total"] == 2


def test_list_pages_and_filters_by_kind(client: TestClient, auth: dict[str, str], seeded: int) -> None:
    traces = _total(client, kind="trace")
    for kind in ("trace", "run", "calibration", "trace"):
        _post(client, auth, {**RECORD, "kind": kind})
    page = client.get(URL, params={"limit": 2, "offset": 1}).json()
    assert (page["total"], page["limit"], page["offset"], len(page["items"])) == (seeded + 4, 2, 1, 2)
    assert [m["kind"] for m in page["items"]] == ["calibration", "run"]
    assert _total(client, kind="trace") == traces + 2


def test_posting_needs_a_key(client: TestClient, seeded: int) -> None:
    assert_problem(client.post(URL, json=RECORD), 401)
    assert _total(client) == seeded


def test_no_route_alters_a_stored_record(client: TestClient, auth: dict[str, str]) -> None:
    saved = _post(client, auth)
    for method in ("PUT", "PATCH", "DELETE"):
        r = client.request(method, f"{URL}/{saved['id']}", json=RECORD, headers=auth)
        assert r.status_code == 405, (method, r.status_code)
    assert client.get(f"{URL}/{saved['id']}").json() == saved


@pytest.mark.parametrize(("path", "value", "field"), [
    (("kind",), "guess", "kind"),
    (("request", "training", "seq_len"), 0, "request.training.seq_len"),
    (("request", "hardware", "gpu"), "nope", "request.hardware.gpu"),
    (("request", "model"), "no-such-model", "request.model"),
    (("measured", "peak_allocated_bytes"), -1, "measured.peak_allocated_bytes"),
    (("measured", "peak_allocated_bytes"), 2**60, "measured.peak_allocated_bytes"),
    (("measured", "peak_allocated_bytes"), "12", "measured.peak_allocated_bytes"),
    (("measured", "step_time_s"), 0, "measured.step_time_s"),
    (("measured", "parts_bytes"), {"Bad Name": 1}, "measured.parts_bytes.Bad Name.[key]"),
    (("measured", "surprise"), 1, "measured.surprise"),
    (("versions", "torch"), "", "versions.torch"),
    (("versions", "cudnn"), "9", "versions.cudnn"),
    (("label",), "", "label"),
    (("notes",), "x" * 2001, "notes"),
    (("surprise",), True, "surprise"),
])
def test_bad_records_are_422_naming_the_field(
    client: TestClient, auth: dict[str, str], seeded: int, path: tuple[str, ...], value: Any, field: str
) -> None:
    record = copy.deepcopy(RECORD)
    target = record
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    body = assert_problem(client.post(URL, json=record, headers=auth), 422)
    named = {e["field"] for e in body["errors"]}
    assert any(n == field or n.startswith(field.split(".[")[0]) for n in named), (field, named)
    assert _total(client) == seeded


@pytest.mark.parametrize("path", ["/999", "/0"])
def test_unknown_or_bad_ids(client: TestClient, path: str) -> None:
    r = client.get(URL + path)
    assert r.status_code in (404, 422)
    assert_problem(r, 404 if path == "/999" else 422)


_BAD_FIGURE = st.one_of(
    st.integers(max_value=-1), st.integers(min_value=2**50 + 1), st.floats(allow_nan=True).filter(lambda x: x != x),
    st.text(max_size=5), st.booleans(), st.lists(st.integers(), max_size=2), st.none().map(lambda _: {"a": 1}))


@given(field=st.sampled_from(["peak_allocated_bytes", "peak_reserved_bytes", "nvml_used_bytes"]),
       side=st.sampled_from(["measured", "estimated"]), value=_BAD_FIGURE)
@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_bad_figure_is_a_422_never_stored(
    client: TestClient, auth: dict[str, str], seeded: int, field: str, side: str, value: Any
) -> None:
    record = copy.deepcopy(RECORD)
    record[side][field] = value
    r = client.post(URL, content=json.dumps(record, allow_nan=True).encode(),
                    headers={**auth, "Content-Type": "application/json"})
    body = assert_problem(r, 422)
    assert any(e["field"].startswith(f"{side}.{field}") or e["field"] == "body" for e in body["errors"]), body
    assert _total(client) == seeded
