"""POST /api/v1/plans: the planner over HTTP (issue 6)."""

from fastapi.testclient import TestClient


def test_plan_70b_lora_on_h100(client: TestClient) -> None:
    body = {"model": "llama-3.1-70b", "training": {"method": "lora", "seq_len": 4096},
            "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 1}, "global_batch_size": 64}
    response = client.post("/api/v1/plans", json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["plans"], data.get("notes")
    best = data["plans"][0]
    assert best["estimate"]["memory"]["fits"] is True
    assert best["estimate"]["layout"]["gpu"] == "h100-sxm5-80gb"
    assert "deepspeed" in str(best["exports"]).lower()


def test_plan_bad_field_is_422_problem(client: TestClient) -> None:
    response = client.post("/api/v1/plans", json={"constraints": {"max_nodes": "many"}})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "max_nodes" in response.text


def test_plan_host_object_is_validated_and_used(client: TestClient) -> None:
    body = {"model": "llama-3.1-8b", "training": {"method": "lora", "train_tokens": 1e9},
            "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 1}, "global_batch_size": 32,
            "host": {"checkpoints_kept": 0}}
    bad = client.post("/api/v1/plans", json=body)
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
    assert "host.checkpoints_kept" in {e["field"] for e in bad.json()["errors"]}
    ok = client.post("/api/v1/plans", json={**body, "host": {"checkpoints_kept": 5}})
    assert ok.status_code == 200, ok.text
    plan = ok.json()["plans"][0]
    assert plan["request"]["host"]["checkpoints_kept"] == 5  # re-estimating the plan keeps the choice


# --- reverse questions ----------------------------------------------------------------------------------------
REVERSE = "/api/v1/plans/reverse"
JOB = {"model": "llama-3.1-70b", "training": {"method": "lora"}, "constraints": {"gpus": ["h100-sxm5-80gb"]}}


def test_reverse_fewest_gpus(client: TestClient) -> None:
    response = client.post(REVERSE, json={**JOB, "question": "fewest-gpus"})
    assert response.status_code == 200, response.text
    data = response.json()
    (item,) = data["fewest_gpus"]
    assert data["question"] == "fewest-gpus" and data["largest_model"] is None
    # 70B LoRA: the frozen bf16 base alone is 141 GB, more than one 80 GB GPU
    assert item["num_gpus"] >= 2 and item["plan"]["layout"]["world_size"] == item["num_gpus"]
    assert item["plan"]["estimate"]["memory"]["fits"] is True
    assert data["answers"][0].startswith(f"h100-sxm5-80gb: {item['num_gpus']} GPUs")


def test_reverse_largest_model_and_longest_sequence(client: TestClient) -> None:
    job = {**JOB, "hardware": {"gpu": "a100-sxm4-80gb", "server": "dgx-a100-80gb", "num_nodes": 1},
           "constraints": {}}
    big = client.post(REVERSE, json={**job, "question": "largest-model", "family": False}).json()
    (answer,) = big["largest_model"]
    assert answer["largest_preset"] and answer["family"] is None and "largest preset" in big["answers"][0]
    long = client.post(REVERSE, json={**job, "question": "longest-sequence", "granularity": 4096,
                                      "global_batch_size": 8}).json()
    (seq,) = long["longest_sequence"]
    assert seq["seq_len"] >= 4096 and seq["seq_len"] % 4096 == 0
    assert seq["plan"]["layout"]["seq_len"] == seq["seq_len"]


def test_reverse_bad_question_is_a_422_naming_the_field(client: TestClient) -> None:
    response = client.post(REVERSE, json={**JOB, "question": "cheapest-gpu"})
    assert response.status_code == 422 and response.headers["content-type"].startswith("application/problem+json")
    assert "question" in {e["field"] for e in response.json()["errors"]}
    unknown = client.post(REVERSE, json={**JOB, "question": "fewest-gpus", "constraints": {"gpus": ["tpu-v9"]}})
    assert unknown.status_code == 422 and "tpu-v9" in unknown.text


def test_reverse_has_a_stable_operation_id(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    assert spec["paths"]["/api/v1/plans/reverse"]["post"]["operationId"] == "plans-answer_reverse_question"


# --- issue 29: the fine-tuning stack mechanisms as a search axis ------------------------------------------------
# (the API tests' seeded catalog has no A100 40GB: the same case at 64k tokens on one H100 80GB)
LORA_64K_H100 = {"model": "llama-3.1-8b",
                 "training": {"method": "lora", "seq_len": 65536, "activation_checkpointing": "full"},
                 "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 1},
                 "global_batch_size": 8}


def test_plan_vary_mechanisms(client: TestClient) -> None:
    off = client.post("/api/v1/plans", json=LORA_64K_H100)
    assert off.status_code == 200, off.text
    assert off.json()["plans"] == []
    on = client.post("/api/v1/plans", json={**LORA_64K_H100, "vary_mechanisms": ["loss_kernel"]})
    assert on.status_code == 200, on.text
    best = on.json()["plans"][0]
    assert best["estimate"]["memory"]["fits"] is True
    assert best["request"]["training"]["loss_kernel"] == "fused"
    changes = best["mechanism_changes"]
    assert changes["changes"] == {"training.loss_kernel": "fused"} and changes["saved_bytes"] > 0
    bad = client.post("/api/v1/plans", json={**LORA_64K_H100, "vary_mechanisms": ["liger"]})
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
    assert any(e["field"].startswith("vary_mechanisms") for e in bad.json()["errors"])
    reverse = client.post(REVERSE, json={**LORA_64K_H100, "question": "fewest-gpus",
                                         "vary_mechanisms": ["loss_kernel"]})
    assert reverse.status_code == 422 and "vary_mechanisms" in reverse.text


def test_openapi_names_vary_mechanisms(client: TestClient) -> None:
    schemas = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert "vary_mechanisms" in schemas["PlanRequest"]["properties"]
    assert "mechanism_changes" in schemas["Plan"]["properties"]
