"""Issue 31's page flow in a real browser: a measurement is posted to the API (as ``capplan check --post``
does), listed at /measurements, opened, and its estimate shows it beside the prediction, "measured on your
hardware", with the difference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from playwright.sync_api import expect

from tests.browser.conftest import ROOT, LiveServer

REQUEST = {"model": "llama-3.2-1b", "training": {"seq_len": 2048},
           "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1}}
MEASURED_PEAK = 21 * 2**30  # 21.00 GiB


def _key(server: LiveServer) -> str:
    """A key made with ``capplan api-keys create`` on the server's own database."""
    env = {**os.environ, "CAPPLAN_DATABASE_URL": f"sqlite:///{server.log_path.parent / 'capplan.db'}"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-m", "app", "api-keys", "create", "--name", "browser-measured"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _post(server: LiveServer, key: str) -> dict:  # type: ignore[type-arg]
    record = {"kind": "run", "request": REQUEST, "gpu_name": "NVIDIA H200", "label": "browser flow",
              "versions": {"torch": "2.13.0", "transformers": "5.24.0", "peft": "0.21.2"},
              "measured": {"peak_allocated_bytes": MEASURED_PEAK, "step_time_s": 0.25},
              "estimated": {"peak_allocated_bytes": 20 * 2**30}}
    req = urllib.request.Request(f"{server.url}/api/v1/measurements", data=json.dumps(record).encode(),
                                 method="POST", headers={"Content-Type": "application/json", "X-API-Key": key})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 201
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_post_a_record_open_the_estimate_see_it_beside_the_prediction(page, live_server) -> None:  # type: ignore[no-untyped-def]
    stored = _post(live_server, _key(live_server))
    page.goto("/measurements")
    row = page.locator("#measurements-table tbody tr", has_text="browser flow")
    expect(row).to_contain_text("NVIDIA H200")
    expect(row).to_contain_text("21.0 GiB")
    row.get_by_role("link", name=str(stored["id"])).click()
    page.wait_for_url(f"**/measurements/{stored['id']}")
    expect(page.locator("#measurement-versions")).to_contain_text("0.21.2")
    page.locator("#measurement-estimate").click()
    page.wait_for_url("**/estimate?**")
    panel = page.locator("#measured-beside")
    expect(panel).to_contain_text("Measured on your hardware")
    table = panel.locator(f"table[data-measurement='{stored['id']}']")
    peak = table.locator("tr", has_text="Peak allocated")
    expect(peak).to_contain_text("21.00 GiB")
    predicted = page.locator("#kpi-total").inner_text()
    assert predicted, "the prediction is on the page too"
    cells = peak.locator("td").all_inner_texts()
    assert cells[0] == "21.00 GiB" and cells[1].endswith("GiB") and cells[2].endswith("%"), cells
    expect(table.locator(".measured-other-gpu")).to_have_count(0)  # an H200's record of an H200 request
    # another request (a longer sequence) has no measurement: no panel
    page.goto(page.url.replace("seq_len=2048", "seq_len=4096"))
    expect(page.locator("#estimate-result")).to_be_visible()
    expect(page.locator("#measured-beside")).to_have_count(0)


def test_the_shipped_h100_run_records_are_listed_and_shown_beside_their_estimates(page, live_server) -> None:  # type: ignore[no-untyped-def]
    """The ``capplan check --run`` records measured on an H100 that capplan ships (seeded when the server
    started: app/data/measurements) are at /measurements; one opened, its estimate shows it beside the
    prediction with its measured peak."""
    with urllib.request.urlopen(f"{live_server.url}/api/v1/measurements?kind=run&limit=100", timeout=30) as resp:
        listed = json.loads(resp.read())
    seeded = [m for m in listed["items"] if m["created_by"] == "capplan-seed"]
    shipped = json.loads((ROOT / "app" / "data" / "measurements" / "check_run_h100.json").read_text())
    assert len(seeded) == len(shipped) >= 5 and {m["gpu_name"] for m in seeded} == {"NVIDIA H100 80GB HBM3"}
    records = []
    for m in seeded:
        with urllib.request.urlopen(f"{live_server.url}/api/v1/measurements/{m['id']}", timeout=30) as resp:
            records.append(json.loads(resp.read()))
    record = next(r for r in records if r["request"]["training"]["method"] == "lora")  # Llama 3.1 8B LoRA
    peak = f"{record['measured']['peak_allocated_bytes'] / 2**30:.2f} GiB"
    page.goto("/measurements")
    rows = page.locator("#measurements-table tbody tr", has_text="NVIDIA H100 80GB HBM3")
    expect(rows).to_have_count(len(shipped))
    page.locator("#measurements-table tbody tr").get_by_role("link", name=str(record["id"]), exact=True).click()
    page.wait_for_url(f"**/measurements/{record['id']}")
    expect(page.locator("#measurement-versions")).to_contain_text(record["versions"]["driver"])
    page.locator("#measurement-estimate").click()
    page.wait_for_url("**/estimate?**")
    panel = page.locator("#measured-beside")
    expect(panel).to_contain_text("Measured on your hardware")
    table = panel.locator(f"table[data-measurement='{record['id']}']")
    expect(table.locator("caption")).to_contain_text("NVIDIA H100 80GB HBM3")
    # the request is the calibration case's, for the H200: the H100's step time is shown, not compared
    expect(table.locator(".measured-other-gpu")).to_contain_text("NVIDIA H200 SXM 141GB")
    step = table.locator("tr", has_text="Step time").locator("td").all_inner_texts()
    assert step[0].endswith("ms") and step[1:] == ["—", "—"], step
    cells = table.locator("tr", has_text="Peak allocated").locator("td").all_inner_texts()
    assert cells[0] == peak and cells[1].endswith("GiB") and cells[2].endswith("%"), (cells, peak)
    assert page.locator("#kpi-total").inner_text(), "the prediction is on the page too"
