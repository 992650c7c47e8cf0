"""One job on several GPUs/servers side by side."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/compare"
JOB = {"model": "llama-3.2-1b", "training": {"seq_len": 2048}}


def test_options_come_back_in_order_with_summaries(client: TestClient) -> None:
    options = [{"gpu": "a100-sxm4-80gb"}, {"server": "dell-xe9680-h100"}, {"gpu": "h200-sxm-141gb", "label": "H200"}]
    r = client.post(URL, json={"request": JOB, "options": options})
    assert r.status_code == 200, r.text
    rows = [x["summary"] for x in r.json()["results"]]
    assert [row["gpu"] for row in rows] == ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb"]
    assert [row["label"] for row in rows] == ["a100-sxm4-80gb", "dell-xe9680-h100", "H200"]
    assert rows[2]["capacity_bytes"] > rows[1]["capacity_bytes"]
    assert all(row["total_bytes"] == rows[0]["total_bytes"] for row in rows)


def test_an_option_can_change_the_node_count(client: TestClient) -> None:
    r = client.post(URL, json={"request": JOB, "options": [{"gpu": "a100-sxm4-80gb", "num_nodes": 2}]})
    assert r.json()["results"][0]["summary"]["gpus"] == 16


@pytest.mark.parametrize(("body", "field"), [
    ({"request": JOB, "options": []}, "options"),
    ({"request": JOB, "options": [{}]}, "options.0"),
    ({"request": JOB, "options": [{"gpu": "a100-sxm4-80gb"}, {"gpu": "nope"}]}, "options.1.gpu"),
    ({"request": JOB, "options": [{"server": "dell-xe9680-h100", "gpus_per_node": 16}]}, "options.0.gpus_per_node"),
    ({"request": {**JOB, "training": {"seq_len": 0}}, "options": [{"gpu": "a100-sxm4-80gb"}]},
     "request.training.seq_len"),
    ({"request": JOB, "options": [{"gpu": "a100-sxm4-80gb"}] * 17}, "options"),
])
def test_bad_comparisons_are_422(client: TestClient, body: object, field: str) -> None:
    assert_problem(client.post(URL, json=body), 422, field)
