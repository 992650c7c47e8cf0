"""``POST /api/v1/imports``: configs in, the request and the reading report out; a bad file is a 422 naming the
file's key, a body over the server's limit a 413, never a 500."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.api.problems import assert_problem

URL = "/api/v1/imports"
DATA = Path(__file__).parents[1] / "data" / "configs"


def _file(name: str) -> dict[str, str]:
    return {"name": name.rsplit("/", 1)[-1], "content": (DATA / name).read_text()}


def test_an_axolotl_yaml_and_its_deepspeed_json(client: TestClient) -> None:
    r = client.post(URL, json=[_file("axolotl/llama3-8b-deepspeed-alst.yaml"),
                               {**_file("axolotl/zero3_bf16_cpuoffload_all.json"),
                                "name": "deepspeed_configs/zero3_bf16_cpuoffload_all.json"}])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["request"]["model"] == "llama-3.1-8b"
    assert body["request"]["parallelism"]["sharding"] == "zero3"
    assert body["request_set"]["parallelism"]["offload"] == "optimizer+params"
    assert [f["format"] for f in body["report"]["files"]] == ["axolotl", "deepspeed"]
    assert "tiled_mlp" in {x["key"] for x in body["report"]["not_represented"]}
    # 8-bit AdamW with the optimizer offloaded to the CPU: the estimator refuses the combination (DeepSpeed's
    # offload needs its CPU Adam), naming the field
    assert_problem(client.post("/api/v1/estimates", json=body["request"]), 422, "training.optimizer")


def test_the_request_it_returns_estimates(client: TestClient) -> None:
    r = client.post(URL, json=[_file("axolotl/fft-8b-liger-fsdp.yaml")])
    est = client.post("/api/v1/estimates", json=r.json()["request"])
    assert est.status_code == 200, est.text
    assert est.json()["layout"]["sharding"] in ("zero3", "fsdp")


def test_the_operation_id_follows_the_convention(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    assert spec["paths"]["/api/v1/imports"]["post"]["operationId"] == "imports-create_import"


def test_an_unknown_model_is_asked_for(client: TestClient) -> None:
    r = client.post(URL, json=[_file("llama-factory/qwen3_lora_sft.yaml")])
    assert r.status_code == 200
    assert any("Qwen/Qwen3-4B-Instruct-2507" in n for n in r.json()["report"]["needs"])


def test_a_bad_value_is_a_422_naming_the_key(client: TestClient) -> None:
    r = client.post(URL, json=[{"name": "a.yaml", "content": "base_model: meta-llama/Llama-3.1-8B\n"
                                                             "micro_batch_size: two\n"}])
    body = assert_problem(r, 422, "files.0.content.micro_batch_size")
    assert "micro_batch_size" in body["detail"]


def test_hostile_and_broken_files_are_422s(client: TestClient) -> None:
    for content, words in (("a: !!python/object/apply:os.system ['id']", "tag"), ("a: " + "[" * 5000 + "]" * 5000,
                                                                                  "nesting"),
                           ("a: [", "not valid YAML"), ("foo: 1", "cannot tell")):
        body = assert_problem(client.post(URL, json=[{"name": "x.yaml", "content": content}]), 422)
        assert body["errors"][0]["field"].startswith("files.0.content") and words in body["detail"], body
    big = "#" + "x" * (1 << 20)
    assert_problem(client.post(URL, json=[{"name": "x.yaml", "content": big}]), 422, "0.content")


def test_a_body_over_the_server_limit_is_a_413(client: TestClient) -> None:
    r = client.post(URL, json=[{"name": "x.yaml", "content": "#" + "x" * (5 << 20)}])
    assert r.status_code == 413
    assert r.headers["content-type"].startswith("application/problem+json")


def test_bad_bodies_are_422(client: TestClient) -> None:
    assert_problem(client.post(URL, json=[]), 422)
    assert_problem(client.post(URL, json=[{"name": "x", "content": "a: 1", "format": "nope"}]), 422, "0.format")
    assert_problem(client.post(URL, json=[{"name": "x", "content": "a: 1"}] * 9), 422)
