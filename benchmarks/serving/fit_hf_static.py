"""Fit the two free constants of the ``hf-static`` engine profile (per-layer fixed time, attention bandwidth
fraction) by least squares over the 8B static-cache sweep (tests/data/serving_h200_raw/8b.json), HBM
efficiency fixed at the measured copy bandwidth (bench.json) over the datasheet 4.8 TB/s. Prints the
constants and every case's error (the 8k-context and 70B-widths sweeps are predictions)::

    PYTHONPATH=. python benchmarks/serving/fit_hf_static.py
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from estimator.inference.engines import ENGINES
from estimator.inference.kv import kv_layout
from estimator.inference.speed import SpeedModel
from estimator.inference.weights import weight_bytes_per_gpu
from estimator.model.spec import ModelShape
from estimator.request import ModelArch

RAW = Path(__file__).resolve().parents[2] / "tests/data/serving_h200_raw"
H200_HBM = 4.8e12
H200_BF16 = 989.5e12


def case_shape(cfg: dict) -> ModelShape:
    return ModelShape(ModelArch(name="measured", num_layers=cfg["layers"], hidden_size=cfg["hidden"],
                                num_attention_heads=cfg["heads"], num_kv_heads=cfg["kv"],
                                ffn_hidden_size=cfg["inter"], vocab_size=cfg["vocab"]))


def model_for(cfg: dict, engine=None) -> SpeedModel:
    shape = case_shape(cfg)
    return SpeedModel(engine=engine or ENGINES["hf-static"], shape=shape,
                      weights=weight_bytes_per_gpu(shape, "bf16", 128, True, 1),
                      kv=kv_layout(shape, "auto", "bf16", 1), hbm_bytes_per_s=H200_HBM, peak_flops=H200_BF16,
                      tp=1, pp=1, link=None, block_size=1)


def main() -> None:
    import numpy as np

    bench = json.loads((RAW / "bench.json").read_text())
    eff = bench["copy_tb_s"] * 1e12 / H200_HBM
    base = replace(ENGINES["hf-static"], hbm_efficiency=eff, layer_overhead_s=0.0, attention_bandwidth_fraction=1e9)
    rows, y = [], []
    d = json.loads((RAW / "8b.json").read_text())
    m = model_for(d["config"], base)
    for r in d["decode"]:
        t0 = m.step_s(r["batch"], r["cache_len"])  # weights / compute only (attention fraction 'infinite')
        kv = r["batch"] * m.kv.request_bytes(r["cache_len"], 1) * (1 + 2 * m.group) / (H200_HBM * eff)
        rows.append([d["config"]["layers"], kv])
        y.append(r["graph_step_s"] - t0)
    (layer, inv), *_ = np.linalg.lstsq(np.array(rows), np.array(y), rcond=None)
    print(f"hbm_efficiency={eff:.3f} layer_overhead_s={layer:.3e} attention_bandwidth_fraction={1 / inv:.3f}")
    fitted = replace(base, layer_overhead_s=float(layer), attention_bandwidth_fraction=float(1 / inv))
    for case in ("8b", "8b-ctx8k", "70b-l20"):
        d = json.loads((RAW / f"{case}.json").read_text())
        m = model_for(d["config"], fitted)
        for r in d["decode"]:
            p = m.step_s(r["batch"], r["cache_len"])
            print(f"{case:9} B={r['batch']:4} measured {r['graph_step_s'] * 1e3:8.2f} ms  model {p * 1e3:8.2f} ms "
                  f"{(p - r['graph_step_s']) / r['graph_step_s'] * 100:+6.1f}%")


if __name__ == "__main__":
    main()
