"""``cost`` in every response kind (estimate, compare, plan, quote and its exports), on the shipped catalog: one
cost basis (own with a server, else one provider class's on-demand offer), no total for a setup that does not
fit, bad basis input a 422 naming the field, and the customer quote (print view and PDF) without raw ids."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from typing import Any

import pytest
from fastapi.testclient import TestClient

from estimator.tco import JobCost, job_cost_owned
from tests.api.problems import assert_problem

JOB = {"model": "llama-3.1-8b", "training": {"method": "lora", "train_tokens": 2e8, "seq_len": 4096}}
SERVERS = {"a100-sxm4-80gb": "nvidia-dgx-a100-640gb", "h100-sxm5-80gb": "nvidia-dgx-h100",
           "h200-sxm-141gb": "nvidia-dgx-h200"}


@pytest.fixture
def catalog() -> Any:  # the cost basis needs the real catalog (prices, TCO defaults)
    from hardware_catalog import load_catalog

    return load_catalog()


def _estimate(client: TestClient, **hardware: Any) -> dict[str, Any]:
    r = client.post("/api/v1/estimates", json={**JOB, "hardware": hardware})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_chosen_server_is_owned_and_priced_like_the_tco_page(client: TestClient, catalog: Any) -> None:
    body = _estimate(client, gpu="h100-sxm5-80gb", server="nvidia-dgx-h100")
    cost = body["cost"]
    assert cost["basis"] == "own" and cost["pricing"] == "owned" and cost["provider"] is None
    assert set(cost) >= {"usd_per_gpu_hour", "source", "date", "confidence", "total_usd", "assumptions"}
    assert "NVIDIA DGX H100" in cost["label"] and cost["date"] == "2023-05"
    assert cost["total_usd"] == pytest.approx(cost["usd_per_gpu_hour"] * body["train"]["gpu_hours"], rel=1e-12)
    job = JobCost(gpu_id="h100-sxm5-80gb", server_id="nvidia-dgx-h100", num_nodes=1, gpus_per_node=8,
                  time_to_train_s=body["train"]["time_to_train_s"], train_tokens=2e8)
    run = job_cost_owned(job, catalog=catalog)
    assert round(run.cost_usd, 2) == round(cost["total_usd"], 2)  # the TCO model's owned run, to the cent
    assert any("amortised" in a for a in cost["assumptions"])


def test_no_server_rents_from_one_provider_class_never_a_capacity_block(client: TestClient, catalog: Any) -> None:
    for gpu in SERVERS:
        cost = _estimate(client, gpu=gpu)["cost"]
        assert cost["basis"] == "rent" and cost["provider_class"] == "hyperscaler" and cost["pricing"] == "on-demand"
        offer = catalog.cloud_offer(cost["offer_id"])
        assert offer.offer_kind == "on-demand" and offer.gpu_id == gpu
        assert cost["usd_per_gpu_hour"] == offer.on_demand_usd_per_gpu_hour
    h200 = _estimate(client, gpu="h200-sxm-141gb")["cost"]
    assert h200["offer_id"] != "aws-capacity-block-p5e"  # the $5.41 capacity block is not an on-demand price


def test_low_confidence_prices_carry_their_flag_into_the_total(client: TestClient) -> None:
    cost = _estimate(client, gpu="h200-sxm-141gb", server="nvidia-dgx-h200")["cost"]  # price estimated from GPUs
    assert cost["confidence"] == "low" and any("Low-confidence" in f for f in cost["flags"])
    coreweave = client.post("/api/v1/estimates", json={**JOB, "hardware": {"gpu": "h100-sxm5-80gb"},
                                                       "cost": {"offer_id": "coreweave-h100"}}).json()["cost"]
    assert (coreweave["offer_id"], coreweave["confidence"]) == ("coreweave-h100", "low")


def test_a_server_without_any_price_is_rented_with_a_flag_and_a_gpu_without_any_has_no_cost(
    client: TestClient,
) -> None:
    nvl = _estimate(client, gpu="h100-nvl-94gb", server="dell-r760xa-h100-nvl", gpus_per_node=4)
    assert nvl["cost"]["basis"] == "rent" and nvl["cost"]["priced_another_way"] is True
    assert "priced as rent instead" in nvl["cost"]["flags"][0]
    h200_nvl = _estimate(client, gpu="h200-nvl-141gb")
    assert h200_nvl["cost"] is None
    assert any("H200 NVL" in w and "no cost shown" in w for w in h200_nvl["warnings"])


def test_no_total_for_a_setup_that_does_not_fit(client: TestClient) -> None:
    body = client.post("/api/v1/estimates", json={
        "model": "llama-3.1-70b", "training": {"method": "full", "train_tokens": 1e8},
        "hardware": {"gpu": "a100-sxm4-80gb", "server": "nvidia-dgx-a100-640gb"}}).json()
    assert body["memory"]["fits"] is False
    assert body["cost"]["total_usd"] is None and body["cost"]["gpu_hours"] is None
    assert body["cost"]["usd_per_gpu_hour"] > 0 and any("Does not fit" in f for f in body["cost"]["flags"])


@pytest.mark.parametrize(("cost", "field"), [
    ({"basis": "lease"}, "cost.basis"),
    ({"pricing": "bargain"}, "cost.pricing"),
    ({"utilisation": 0}, "cost.utilisation"),
    ({"provider_class": "mainframe"}, "cost.provider_class"),
    ({"offer_id": "aws-p9"}, "cost.offer_id"),
    ({"offer_id": "aws-p4d-24xlarge"}, "cost.offer_id"),  # an A100 offer for an H100 job
    ({"offer_id": "aws-p5en-48xlarge", "pricing": "reserved"}, "cost.pricing"),
    ({"surprise": 1}, "cost.surprise"),
])
def test_bad_basis_input_is_a_422_naming_the_field(client: TestClient, cost: dict[str, Any], field: str) -> None:
    gpu = "h200-sxm-141gb" if cost.get("offer_id") == "aws-p5en-48xlarge" else "h100-sxm5-80gb"
    r = client.post("/api/v1/estimates", json={**JOB, "hardware": {"gpu": gpu}, "cost": cost})
    assert_problem(r, 422, field)


QUOTE_HW = {"gpu": "h100-sxm5-80gb", "server": "dell-xe9680-h100"}


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/v1/compare", {"request": {**JOB, "cost": {"basis": "lease"}}, "options": [{"gpu": "h100-sxm5-80gb"}]},
     "request.cost.basis"),
    ("/api/v1/compare", {"request": {**JOB, "cost": {"utilisation": 2}}, "options": [{"server": "nvidia-dgx-h100"}]},
     "request.cost.utilisation"),
    ("/api/v1/compare", {"request": {**JOB, "cost": {"offer_id": "aws-p4d-24xlarge"}},
                         "options": [{"gpu": "h100-sxm5-80gb"}]}, "request.cost.offer_id"),
    ("/api/v1/plans", {**JOB, "pricing": "owned", "cost": {"utilisation": 0}}, "cost.utilisation"),
    ("/api/v1/plans", {**JOB, "pricing": "owned", "cost": {"pue": 9}}, "cost.pue"),
    ("/api/v1/plans", {**JOB, "pricing": "owned", "cost": {"basis": "rent"}}, "cost"),
    ("/api/v1/plans", {**JOB, "pricing": "bargain"}, "pricing"),
    ("/api/v1/quotes", {"name": "q", "inputs": {**JOB, "hardware": QUOTE_HW, "cost": {"pricing": "bargain"}},
                        "chosen_option": "dell-xe9680-h100", "server_count": 1, "price": "1.00"},
     "inputs.cost.pricing"),
    ("/api/v1/quotes", {"name": "q", "inputs": {**JOB, "hardware": QUOTE_HW, "cost": {"electricity_usd_per_kwh": -1}},
                        "chosen_option": "dell-xe9680-h100", "server_count": 1, "price": "1.00"},
     "inputs.cost.electricity_usd_per_kwh"),
])
def test_bad_basis_input_is_a_422_naming_the_field_in_every_request_kind(
    client: TestClient, auth: dict[str, str], path: str, body: dict[str, Any], field: str,
) -> None:
    assert_problem(client.post(path, json=body, headers=auth), 422, field)


def test_the_owned_basis_takes_power_price_pue_and_utilisation(client: TestClient, catalog: Any) -> None:
    """``cost.electricity_usd_per_kwh``, ``cost.pue`` and ``cost.utilisation`` price the owned server as the TCO
    model does with the same three assumptions; the plan's ``cost`` takes them too and its estimate agrees."""
    from estimator.tco import TcoAssumptions, ownership_tco

    hw = {"gpu": "h100-sxm5-80gb", "server": "nvidia-dgx-h100", "num_nodes": 1, "gpus_per_node": 8}
    setting = {"electricity_usd_per_kwh": 0.25, "pue": 1.6, "utilisation": 0.6}
    cost = client.post("/api/v1/estimates", json={**JOB, "hardware": hw, "cost": setting}).json()["cost"]
    tco = ownership_tco("nvidia-dgx-h100", 1, TcoAssumptions(**setting), catalog, 8)
    assert cost["usd_per_gpu_hour"] == pytest.approx(tco.usd_per_gpu_hour) and cost["utilisation"] == 0.6
    default = _estimate(client, **hw)["cost"]["usd_per_gpu_hour"]
    assert cost["usd_per_gpu_hour"] > default  # dearer power, worse PUE, fewer useful hours
    plan = client.post("/api/v1/plans", json={**JOB, "hardware": hw, "pricing": "owned", "cost": setting,
                                              "global_batch_size": 64, "top_k": 1}).json()["plans"][0]
    assert plan["cost"]["usd_per_gpu_hour"] == pytest.approx(tco.usd_per_gpu_hour)
    again = client.post("/api/v1/estimates", json=plan["request"]).json()["cost"]
    assert round(again["total_usd"], 2) == round(plan["cost"]["cost_usd"], 2)


def test_compare_prices_every_option_on_one_basis(client: TestClient) -> None:
    gpus = client.post("/api/v1/compare", json={"request": JOB, "options": [{"gpu": g} for g in SERVERS]}).json()
    assert gpus["cost_basis"]["basis"] == "rent"
    classes = {r["summary"]["cost"]["provider_class"] for r in gpus["results"]}
    assert classes == {"hyperscaler"}
    servers = client.post("/api/v1/compare", json={
        "request": JOB, "options": [{"server": s} for s in SERVERS.values()]}).json()
    assert servers["cost_basis"]["basis"] == "own"
    for row in servers["results"]:
        own = row["summary"]["cost"]
        assert own["basis"] == "own"
        alone = _estimate(client, gpu=row["summary"]["gpu"], server=row["summary"]["server"])["cost"]
        assert round(own["total_usd"], 2) == round(alone["total_usd"], 2)  # the same as /estimates, to the cent
    mixed = client.post("/api/v1/compare", json={
        "request": JOB, "options": [{"gpu": "h100-sxm5-80gb"}, {"server": "nvidia-dgx-h100"}]}).json()
    assert {r["summary"]["cost"]["basis"] for r in mixed["results"]} == {"rent"}  # like for like


def test_plan_cost_is_its_estimates_cost(client: TestClient) -> None:
    body = {"model": "llama-3.1-8b", "training": {"method": "lora", "seq_len": 4096, "train_tokens": 2e8},
            "hardware": {"gpu": "h100-sxm5-80gb", "server": "nvidia-dgx-h100", "num_nodes": 1, "gpus_per_node": 8},
            "pricing": "owned", "global_batch_size": 64}
    data = client.post("/api/v1/plans", json=body).json()
    assert data["plans"], data.get("notes")
    for plan in data["plans"]:
        pc, ec = plan["cost"], plan["estimate"]["cost"]
        assert pc["basis"] == ec["basis"] == "own" and pc["usd_per_gpu_hour"] == ec["usd_per_gpu_hour"]
        assert round(pc["cost_usd"], 2) == round(ec["total_usd"], 2) == round(pc["total_usd"], 2)
        again = client.post("/api/v1/estimates", json=plan["request"]).json()["cost"]
        assert round(again["total_usd"], 2) == round(pc["cost_usd"], 2)


QUOTE = {"name": "8B LoRA", "customer": "Acme", "inputs": {**JOB, "hardware": {
    "gpu": "h100-sxm5-80gb", "server": "dell-xe9680-h100"}}, "chosen_option": "dell-xe9680-h100",
    "server_count": 1, "price": "4200.00"}


def test_quotes_store_recompute_and_export_the_cost(client: TestClient, auth: dict[str, str]) -> None:
    saved = client.post("/api/v1/quotes", json=QUOTE, headers=auth).json()
    cost = saved["revision"]["result"]["cost"]
    assert cost["basis"] == "own" and cost["total_usd"] > 0
    qid = saved["id"]
    dry = client.post(f"/api/v1/quotes/{qid}/recompute?dry_run=true", headers=auth)
    assert dry.status_code == 200, dry.text
    assert not [d for d in dry.json()["diff"] if d["path"].startswith("cost")]  # re-computed: the same cost
    rows = dict(csv.reader(io.StringIO(client.get(f"/api/v1/quotes/{qid}.csv").text)))
    assert float(rows["result.cost.total_usd"]) == pytest.approx(cost["total_usd"])
    assert rows["result.cost.basis"] == "own"
    exported = client.get(f"/api/v1/quotes/{qid}.json").json()
    assert exported["revisions"][0]["result"]["cost"] == cost


RAW = ("1000000000.0", "200000000.0", "None", "null", "host ")


def _raw_ids(catalog: Any) -> list[str]:
    """Every catalog id (GPU, server, cloud offer): none may show in a customer document."""
    return [*catalog.gpus, *catalog.servers, *(o.id for o in catalog.cloud_offers)]


def test_the_print_view_is_customer_ready(client: TestClient, auth: dict[str, str], catalog: Any) -> None:
    qid = client.post("/api/v1/quotes", json=QUOTE, headers=auth).json()["id"]
    html = client.get(f"/api/v1/quotes/{qid}/print").text
    for raw in (*RAW, *_raw_ids(catalog)):
        assert raw not in html, raw
    for words in ("Dell PowerEdge XE9680 (8x H100 SXM5)", "Time to train", "GPU-hours", "Energy", "Cost basis",
                  "owned", "Cost to train", "Quoted price", "$4,200.00", "Valid until", "Assumptions", "± "):
        assert words in html, words


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_the_pdf_is_a_real_pdf_without_raw_ids(client: TestClient, auth: dict[str, str], catalog: Any) -> None:
    qid = client.post("/api/v1/quotes", json=QUOTE, headers=auth).json()["id"]
    r = client.get(f"/api/v1/quotes/{qid}.pdf")
    assert r.status_code == 200 and r.headers["content-type"] == "application/pdf"
    assert r.content.startswith(b"%PDF-")
    text = subprocess.run(["pdftotext", "-layout", "-", "-"], input=r.content, capture_output=True,
                          check=True).stdout.decode()
    for raw in (*RAW, *_raw_ids(catalog)):
        assert raw not in text, raw
    for words in ("8B LoRA", "Dell PowerEdge XE9680", "Time to train", "GPU-hours", "Cost to train", "$4,200.00",
                  "Valid until"):
        assert words in text, words


def test_a_saved_plan_prints_and_downloads_too(client: TestClient, auth: dict[str, str], catalog: Any) -> None:
    saved = client.post("/api/v1/saved-plans", json={"name": "8B on H200", "inputs": {
        **JOB, "hardware": {"gpu": "h200-sxm-141gb"}}}, headers=auth)
    assert saved.status_code == 201, saved.text
    pid = saved.json()["id"]
    html = client.get(f"/api/v1/saved-plans/{pid}/print").text
    assert "rented: AWS p5en.48xlarge" in html and "Quoted price" not in html
    for raw in _raw_ids(catalog):
        assert raw not in html, raw
    pdf = client.get(f"/api/v1/saved-plans/{pid}.pdf")
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")
    assert client.get("/api/v1/saved-plans/999999.pdf").status_code == 404
