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
