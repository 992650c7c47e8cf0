"""Issue 31's acceptance on a GPU: one calibration case of every memory class of ``docs/accuracy.md`` run through
``capplan check --run`` (each in its own process), and the same cases measured again by the calibration's own
``measure.py`` on the same machine, so the two methods' figures can be set side by side.

GPU machine (torch, transformers and peft installed, no capplan web dependencies; pydantic carried as wheels,
``docs/check.md``, "--run on our GPU"), from the repository root::

    python3 benchmarks/calibration/check_run_batch.py --out $OUT --baseline

writes ``$OUT/check_run.jsonl`` (one line per case: its class, the exit code, the wall time, the record
``python -m app.check REQUEST --run --json`` wrote, the tails of its output) and, with ``--baseline``, the same
cases measured by the calibration's own scripts, one process each as the calibration runs them:
``$OUT/measure/results.jsonl`` and ``provenance.json`` (``measure.py --ids ...``: the data-parallel cases) and
``$OUT/measure_tp/`` (``measure_tp.py --ids ...``: the tensor-parallel case). Back here::

    python benchmarks/calibration/check_run_batch.py --compare DIR     # the table: run vs calibration
    python benchmarks/calibration/check_run_batch.py --ship DIR        # its records, shipped with the app

CPU dry run (``--dry-run --baseline --out DIR``): tiny shapes of the same cases; each case through
``python -m app.check REQUEST --trace`` (the CLI path, the record; the TP case is refused there: the trace
follows no TP plan) and through ``python -m app.check.run REQUEST --cpu`` (``--run``'s own model build, TP plan,
FSDP2 wrap, loss and steps on the CPU, with the fake process group; no memory is read on the CPU), then
``measure.py --dry-run`` and ``measure_tp.py --dry-run`` on the same cases. What it cannot cover: CUDA's memory
readings, NVML and step times.

``python -m app.check`` is ``capplan check``'s own path (:func:`app.check.command.check_request`) without the
typer / FastAPI wrapper, which the GPU machine lacks.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "tests" / "data" / "calibration_h200.json"
TP_RAW = ROOT / "tests" / "data" / "calibration_h200_raw" / "call5_tp.jsonl"

#: (memory class of docs/accuracy.md, calibration case id): the cheapest case of each class that fits an 80 GB
#: card, plus eager attention (issue 31's estimator finding). The tensor-parallel case runs rank 0 of TP 2 under
#: the fake process group with measure_tp.py's plan (app/check/tensor_parallel.py), memory only.
CASES: list[tuple[str, str]] = [
    ("full", "l1b-full-mixed-fused-b1-s4096-nock"),
    ("full", "l1b-full-mixed-eager-fused-b1-s2048-nock"),
    ("lora", "l8b-lora16al-fused-b1-s4096-nock"),
    ("sharded", "l8b-full-mixed-fused-b1-s4096-ck-fsdp8"),
    ("tensor_parallel", "l1b-full-mixed-fused-b2-s4096-nock-tp2"),
]
#: figures compared between a --run record and a measure.py measurement of the same case
FIGURES = ("peak_allocated_bytes", "peak_reserved_bytes", "nvml_used_bytes", "step_time_s", "tokens_per_s")


def calibration_cases() -> dict[str, dict[str, Any]]:
    """Case id -> the calibration's case (``request``, ``measured``): calibration_h200.json and the TP call."""
    out = {c["id"]: c for c in json.loads(CALIBRATION.read_text())["cases"]}
    for line in TP_RAW.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out.setdefault(r["id"], r)
    return out


def dry_request(request: dict[str, Any]) -> dict[str, Any]:
    """Tiny shapes of the same structure (GQA, ties, head_dim) for the CPU dry run."""
    r = copy.deepcopy(request)
    m = r["model"]
    heads = 4
    kv = heads if (m.get("num_kv_heads") or m["num_attention_heads"]) == m["num_attention_heads"] else 2
    m.update(num_layers=2, hidden_size=64, num_attention_heads=heads, num_kv_heads=kv, ffn_hidden_size=128,
             vocab_size=512)
    if m.get("head_dim"):
        m["head_dim"] = 16
    r["training"].update(seq_len=32, micro_batch_size=1)
    return r


def _tail(text: str, n: int = 3000) -> str:
    return text[-n:]


def is_tp(case_id: str) -> bool:
    """Whether a calibration case is measure_tp.py's (a ``-tpN`` layout)."""
    return "-tp" in case_id


def memory_only(case_id: str) -> bool:
    """Whether the case runs one rank of several through the fake process group (FSDP2 or TP): its step has no
    real collectives, so only its memory is compared."""
    return "-fsdp" in case_id or is_tp(case_id)


def _commands(request_path: Path, out_path: Path, dry: bool, case_id: str) -> list[tuple[str, list[str]]]:
    """(mode, command) of one case: ``--run`` on the GPU; on the CPU ``--trace`` (unless TP) and the run path."""
    if not dry:
        return [("run", [sys.executable, "-m", "app.check", str(request_path), "--run", "--steps", "5",
                         "--json", str(out_path)])]
    cmds = [] if is_tp(case_id) else [("trace", [sys.executable, "-m", "app.check", str(request_path), "--trace",
                                                 "--json", str(out_path)])]
    raw = out_path.with_suffix(".raw.json")
    return [*cmds, ("cpu-run", [sys.executable, "-m", "app.check.run", str(request_path), "--cpu", "--steps", "3",
                                "--json", str(raw)])]


def _env() -> dict[str, str]:
    """The environment of each case's process: this checkout first on the path, the estimator as plain Python."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env.setdefault("CAPPLAN_NATIVE", "0")
    return env


def _run_each(out: Path, sink_name: str, cases: list[tuple[str, str, dict[str, Any]]], dry: bool, timeout: float,
              width: tuple[int, int], keep_request: bool = False) -> list[str]:
    """Each ``(class, case id, request)`` through :func:`_commands` (``python -m app.check``) in its own process;
    one JSON line per command in ``out / sink_name`` (with the request when ``keep_request``). The ids that ran."""
    env = _env()
    ran: list[str] = []
    kw, cw = width
    with tempfile.TemporaryDirectory() as tmp, (out / sink_name).open("a") as sink:
        for i, (klass, cid, request) in enumerate(cases, 1):
            req_path, rec_path = Path(tmp) / f"{cid}.request.json", Path(tmp) / f"{cid}.record.json"
            req_path.write_text(json.dumps(request))
            for mode, cmd in _commands(req_path, rec_path, dry, cid):
                print(f"[{i}/{len(cases)}] {mode} {klass} {cid} ...", flush=True)
                t0 = time.perf_counter()
                try:
                    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
                    rc, stdout, stderr = p.returncode, p.stdout, p.stderr
                except subprocess.TimeoutExpired as exc:
                    rc, stdout, stderr = 124, str(exc.stdout or ""), str(exc.stderr or "")
                raw_path = rec_path.with_suffix(".raw.json")
                line = {"class": klass, "case_id": cid, "dry_run": dry, "mode": mode, "command": " ".join(cmd[1:]),
                        "rc": rc, "wall_s": round(time.perf_counter() - t0, 1),
                        **({"request": request} if keep_request else {}),
                        "record": (json.loads(rec_path.read_text()) if mode != "cpu-run" and rec_path.exists()
                                   else None),
                        "raw": json.loads(raw_path.read_text()) if mode == "cpu-run" and raw_path.exists() else None,
                        "stdout_tail": _tail(stdout), "stderr_tail": _tail(stderr)}
                rec_path.unlink(missing_ok=True)
                raw_path.unlink(missing_ok=True)
                sink.write(json.dumps(line) + "\n")
                sink.flush()
                print(f"{klass:{kw}s} {cid:{cw}s} {mode:7s} rc={rc} {line['wall_s']:6.1f}s", flush=True)
                print(stdout.strip()[-1500:] or stderr.strip()[-800:], flush=True)
                if rc == 0 and cid not in ran:
                    ran.append(cid)
    return ran


def run_cases(out: Path, dry: bool, timeout: float) -> list[str]:
    """Each case through ``python -m app.check`` in its own process; one JSONL line each. The ids that ran."""
    cal = calibration_cases()
    cases = [(klass, cid, dry_request(cal[cid]["request"]) if dry else cal[cid]["request"]) for klass, cid in CASES]
    return _run_each(out, "check_run.jsonl", cases, dry, timeout, (16, 45))


def _ok_figures(paths: list[Path], only_memory: Any) -> dict[str, dict[str, Any]]:
    """Case id -> ``measured_figures`` of each ok line of the calibration scripts' ``results.jsonl`` files."""
    from app.check.record import measured_figures

    out: dict[str, dict[str, Any]] = {}
    for res in paths:
        if not res.exists():
            continue
        for line in res.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if r.get("status") == "ok":
                    out[r["id"]] = measured_figures(r["measured"], memory_only=only_memory(r["id"]))
    return out


def _shown(fig: str, vals: list[Any]) -> list[str]:
    return [("-" if v is None else f"{v / 2**30:.3f} GiB" if fig.endswith("bytes") else f"{v:.4g}") for v in vals]


def baseline(out: Path, ids: list[str], dry: bool, deadline: float) -> None:
    """The calibration's own measurement of the same cases on this machine: ``measure.py --ids`` (one process,
    one forked child per case) for the data-parallel cases, ``measure_tp.py --ids`` for the tensor-parallel
    one, as the calibration measured each."""
    here = ROOT / "benchmarks" / "calibration"
    for script, sel, folder in (("measure.py", [i for i in ids if not is_tp(i)], "measure"),
                                ("measure_tp.py", [i for i in ids if is_tp(i)], "measure_tp")):
        if not sel:
            continue
        cmd = [sys.executable, str(here / script), "--ids", *sel, "--out", str(out / folder),
               "--deadline", str(deadline), *(["--dry-run"] if dry else [])]
        print("baseline:", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=False)


def compare(folder: Path) -> None:
    """Each --run record beside the calibration's committed H200 measurement and, when present, this machine's
    baseline by the calibration's scripts (measure.py, measure_tp.py): the same figures
    (``app.check.record.measured_figures`` of each raw measurement)."""
    sys.path.insert(0, str(ROOT))
    from app.check.record import measured_figures

    cal = calibration_cases()
    base = _ok_figures([folder / "measure" / "results.jsonl", folder / "measure_tp" / "results.jsonl"], memory_only)
    print(f"{'case':45s} {'figure':22s} {'check --run':>14s} {'calibration here':>16s} {'H200 calibration':>17s}")
    for line in (folder / "check_run.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("mode", "run") != "run":
            continue
        rec = row.get("record") or {}
        got = rec.get("measured") or {}
        committed = measured_figures(cal[row["case_id"]]["measured"], memory_only=memory_only(row["case_id"]))
        if not got:
            print(f"{row['case_id']:45s} rc={row['rc']}: {row['stderr_tail'].strip()[-200:]}")
            continue
        for fig in FIGURES:
            vals = [got.get(fig), base.get(row["case_id"], {}).get(fig), committed.get(fig)]
            if all(v is None for v in vals):
                continue
            shown = _shown(fig, vals)
            print(f"{row['case_id']:45s} {fig:22s} {shown[0]:>14s} {shown[1]:>16s} {shown[2]:>17s}")


#: the records capplan ships and seeds at start-up (app/services/measurements.py; docs/check.md)
SHIPPED = ROOT / "app" / "data" / "measurements" / "check_run_h100.json"


def shipped_records(folders: list[Path]) -> list[dict[str, Any]]:
    """The records of the folders this wrote (the cases that ran on the GPU, verbatim, in order: each folder's
    memory classes, ``check_run.jsonl``, then its mechanism classes, ``check_run_mechanisms.jsonl``)."""
    records: list[dict[str, Any]] = []
    for folder in folders:
        for name in ("check_run.jsonl", "check_run_mechanisms.jsonl"):
            path = folder / name
            if not path.exists():
                continue
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            records += [r["record"] for r in rows
                        if r.get("mode", "run") == "run" and r["rc"] == 0 and r.get("record")]
    return records


def ship(folders: list[Path]) -> None:
    """Write :func:`shipped_records` to :data:`SHIPPED`, the JSON list the app seeds;
    tests/test_check_run_h100.py keeps the two equal."""
    records = shipped_records(folders)
    SHIPPED.write_text(json.dumps(records, indent=1) + "\n")
    print(f"{len(records)} records -> {SHIPPED.relative_to(ROOT)}")


# ======================================================================================================================
# Issue 29's mechanism classes (docs/accuracy.md, "Fine-tuning stacks and round 3 on the H100"): one H100 case of
# each through ``python -m app.check --run`` (the mechanisms applied by app/check/stacks.py) and, with --baseline,
# the same cases by measure_stacks.py --ids on the same machine. Kept apart from the classes above (--mechanisms).
# ======================================================================================================================
STACKS_RAW = ROOT / "tests" / "data" / "stacks_h100_raw"

#: (mechanism class of docs/accuracy.md, stacks_h100_raw case id): Llama 3.2 1B full fine-tunes, 8-13 s each in
#: measure_stacks.py on the H100 (call 1's wall times; --run adds its process' start). TRL's chunked loss
#: (``...-s4096-ck-losstrl``, training.stack trl) is the same class as torchtune's: left out to keep the batch
#: under 4 minutes
MECHANISM_CASES: list[tuple[str, str]] = [
    ("loss_kernel:chunked", "h100-l1b-full-mixed-fused-b1-s4096-ck-losstorchtune"),
    ("loss_kernel:fused", "h100-l1b-full-mixed-fused-b1-s4096-ck-losscce"),
    ("fused_kernels:liger", "h100-l1b-full-mixed-fused-b1-s4096-ck-lossliger-ligerk"),
    ("activation_offloading:all", "h100-l1b-full-mixed-fused-b1-s8192-ck-offtrl"),
    ("optimizer:blockwise-8bit", "h100-l1b-full-mixed-fused-b1-s2048-ck-paged-adamw-8bit"),
    ("optimizer:paged-adamw", "h100-l1b-full-mixed-fused-b1-s2048-ck-paged-adamw-32bit"),
    ("optimizer:muon", "h100-l1b-full-mixed-fused-b1-s2048-ck-muon"),
    # torchao's low-bit AdamW (classes added after call 3 of check_run_h100: run in call 4)
    ("optimizer:adamw-4bit", "h100-l1b-full-mixed-fused-b1-s2048-ck-ao-adamw-4bit"),
    ("optimizer:ao-adamw-8bit", "h100-l1b-full-mixed-fused-b1-s2048-ck-ao-adamw-8bit"),
]


def stack_cases_measured() -> dict[str, dict[str, Any]]:
    """Case id -> the committed H100 result (``case``: the stack_cases.py case, ``measured``)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(STACKS_RAW.glob("call*_results.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if r.get("status") == "ok" and "case" in r:
                    out.setdefault(r["id"], r)
    return out


def mechanism_request(case: dict[str, Any]) -> dict[str, Any]:
    """The case's request with issue 29's fields (``stacks_compare.request_for``: the mapping the accuracy table
    uses), so ``--run`` applies the mechanism the case measured."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.calibration.stacks_compare import request_for

    body = request_for(case)
    if body is None:
        raise ValueError(f"{case['id']}: no request value describes its mechanism")
    return body


def run_mechanism_cases(out: Path, dry: bool, timeout: float, only: list[str] | None = None) -> list[str]:
    """Each mechanism case through ``python -m app.check --run`` (in the dry run ``--trace`` and the run path on
    the CPU, :func:`_commands`) in its own process; one line each in ``check_run_mechanisms.jsonl``. The ids that
    ran."""
    measured = stack_cases_measured()
    cases = []
    for klass, cid in MECHANISM_CASES:
        if only and cid not in only:
            continue
        request = mechanism_request(measured[cid]["case"])
        cases.append((klass, cid, dry_request(request) if dry else request))
    return _run_each(out, "check_run_mechanisms.jsonl", cases, dry, timeout, (26, 56), keep_request=True)


def mechanism_baseline(out: Path, ids: list[str], dry: bool, deadline: float) -> None:
    """The calibration's own measurement of the same cases here: ``measure_stacks.py --ids`` (the mechanisms from
    the same app/check/stacks.py)."""
    if not ids:
        return
    cmd = [sys.executable, str(ROOT / "benchmarks" / "calibration" / "measure_stacks.py"), "--ids", *ids,
           "--out", str(out / "measure_stacks"), "--deadline", str(deadline), *(["--dry-run"] if dry else [])]
    print("baseline:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=False)


def compare_mechanisms(folder: Path) -> None:
    """Each mechanism --run record beside ``measure_stacks.py`` on the same machine and the committed H100
    measurement (``tests/data/stacks_h100_raw``), the same figures (``measured_figures`` of each raw result), and
    what --run applied."""
    sys.path.insert(0, str(ROOT))
    from app.check.record import measured_figures

    committed = stack_cases_measured()
    base = _ok_figures([folder / "measure_stacks" / "results.jsonl"], lambda _cid: False)
    print(f"{'case':56s} {'figure':22s} {'check --run':>14s} {'measure_stacks':>16s} {'H100 committed':>16s} "
          f"{'run/base':>9s}")
    for line in (folder / "check_run_mechanisms.jsonl").read_text().splitlines():
        row = json.loads(line)
        got = (row.get("record") or {}).get("measured") or {}
        if not got:
            print(f"{row['case_id']:56s} {row.get('mode', 'run')} rc={row['rc']}: "
                  f"{(row['stderr_tail'].strip() or row['stdout_tail'].strip())[-200:]}")
            continue
        for field, what in (got.get("mechanisms") or {}).items():
            print(f"{row['case_id']:56s} applied {field}: {what}")
        ref = measured_figures(committed[row["case_id"]]["measured"], memory_only=False)
        for fig in FIGURES:
            vals = [got.get(fig), base.get(row["case_id"], {}).get(fig), ref.get(fig)]
            if all(v is None for v in vals):
                continue
            shown = _shown(fig, vals)
            ratio = f"{vals[0] / vals[1]:.4f}" if vals[0] and vals[1] else "-"
            print(f"{row['case_id']:56s} {fig:22s} {shown[0]:>14s} {shown[1]:>16s} {shown[2]:>16s} {ratio:>9s}")
# ========================================================================== end of issue 29's mechanism classes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for check_run.jsonl (and measure/ with --baseline)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: tiny shapes, --trace, measure.py --dry-run")
    ap.add_argument("--baseline", action="store_true", help="also measure the same cases with measure.py here")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per case")
    ap.add_argument("--deadline", type=float, default=270.0, help="measure.py's --deadline (seconds)")
    ap.add_argument("--compare", type=Path, help="print the comparison of a folder this wrote")
    ap.add_argument("--ship", type=Path, nargs="+", help="write the records of folders this wrote to "
                    + str(SHIPPED.name))
    ap.add_argument("--ids", nargs="*", help="with --mechanisms: only these cases of MECHANISM_CASES")
    ap.add_argument("--mechanisms", action="store_true", help="issue 29's mechanism classes only "
                    "(MECHANISM_CASES, measure_stacks.py as the baseline)")
    args = ap.parse_args()
    if args.compare:
        if (args.compare / "check_run_mechanisms.jsonl").exists():
            compare_mechanisms(args.compare)
        if (args.compare / "check_run.jsonl").exists():
            compare(args.compare)
        return
    if args.ship:
        ship(args.ship)
        return
    if not args.out:
        ap.error("--out is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.mechanisms:  # issue 29's classes (their own section above)
        ran = run_mechanism_cases(out, args.dry_run, args.timeout, args.ids)
        print(f"--run: {len(ran)} of {len(MECHANISM_CASES)} cases ran, {time.perf_counter() - t0:.0f} s", flush=True)
        if args.baseline:  # every case, whether or not its run ran
            ids = [cid for _klass, cid in MECHANISM_CASES if not args.ids or cid in args.ids]
            mechanism_baseline(out, ids, args.dry_run, args.deadline)
        print(f"done in {time.perf_counter() - t0:.0f} s", flush=True)
        return
    ran = run_cases(out, args.dry_run, args.timeout)
    print(f"--run: {len(ran)} of {len(CASES)} cases ran, {time.perf_counter() - t0:.0f} s", flush=True)
    if args.baseline:  # every case, whether or not its run ran: the calibration's figures on this machine
        baseline(out, [cid for _klass, cid in CASES], args.dry_run, args.deadline)
    print(f"done in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
