from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/estimates"
SMALL = {"model": "llama-3.2-1b", "training": {"seq_len": 2048}, "hardware": {"gpu": "h100-sxm5-80gb"}}


def test_one_request_gives_one_response(client: TestClient) -> None:
    r = client.post(URL, json=SMALL)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["memory"]["fits"] is True
    assert body["catalog_version"] == "test-1"
    assert r.headers["x-request-id"]


def test_a_list_gives_a_list_in_order(client: TestClient) -> None:
    second = {**SMALL, "hardware": {"gpu": "a100-sxm4-80gb"}}
    r = client.post(URL, json=[SMALL, second])
    assert r.status_code == 200, r.text
    assert [x["layout"]["gpu"] for x in r.json()] == ["h100-sxm5-80gb", "a100-sxm4-80gb"]


def test_defaults_alone_are_a_valid_request(client: TestClient) -> None:
    assert client.post(URL, json={}).status_code == 200


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"training": {"seq_len": 0}}, "training.seq_len"),
        ({"training": {"micro_batchsize": 2}}, "training.micro_batchsize"),
        ({"parallelism": {"sharding": "zero4"}}, "parallelism.sharding"),
        ([SMALL, {"hardware": {"num_nodes": -1}}], "1.hardware.num_nodes"),
        ({"hardware": {"gpu": "no-such-gpu"}}, "hardware.gpu"),
        ([SMALL, {"hardware": {"gpu": "no-such-gpu"}}], "1.hardware.gpu"),
        ({"model": "no-such-model"}, "model"),
        ({"model": {"hf_config": {"hidden_size": "abc", "num_attention_heads": 32, "num_hidden_layers": 32,
                                  "vocab_size": 32000}}}, "model.hf_config.hidden_size"),
        ({"model": {"hf_config": {"text_config": None, "model_type": "mixtral", "hidden_size": 4096,
                                  "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000,
                                  "num_local_experts": "x"}}}, "model.hf_config.num_local_experts"),
        ({"model": {"hf_config": {"text_config": [], "hidden_size": 4096}}}, "model.hf_config.text_config"),
        ({"training": {"micro_batch_size": True}}, "training.micro_batch_size"),
        ({"training": {"train_tokens": 1e308}}, "training.train_tokens"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(client: TestClient, payload: object, field: str) -> None:
    assert_problem(client.post(URL, json=payload), 422, field)


def test_not_json_is_a_422(client: TestClient) -> None:
    r = client.post(URL, content=b"{not json", headers={"content-type": "application/json"})
    assert_problem(r, 422)


def test_too_many_in_one_list(client: TestClient) -> None:
    assert_problem(client.post(URL, json=[{}] * 101), 422, "body")


def test_request_id_is_echoed(client: TestClient) -> None:
    r = client.post(URL, json={"training": {"seq_len": 0}}, headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert r.json()["request_id"] == "abc-123"
