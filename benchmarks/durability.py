"""Durability run (issue 15): kill -9 the server during concurrent writes; no acknowledged write may be lost.

For each database (SQLite, and PostgreSQL with ``--postgres-url``), three rounds on one database: start
``capplan serve``; writer threads save quotes (``POST /api/v1/quotes``) and recompute the ones they saved
(``POST .../recompute``), recording every write the server acknowledged (201 with the quote's id, 200 with
the new revision number); after a random 2-6 s the server process gets SIGKILL in the middle of that. The
next round's server (and a last one after round three) then reads back every acknowledged quote and revision:
a missing one, or one whose name or number differs, is a lost write. Revisions are also checked for gaps
(numbers 1..n). Benchmarks do not run in CI.

    PYTHONPATH=. .venv/bin/python benchmarks/durability.py --postgres-url postgresql+psycopg://... --out /tmp/d.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from benchmarks import _server

INPUTS = {"model": "llama-3.2-1b", "hardware": {"server": "dell-xe9680-h100", "gpu": "h100-sxm5-80gb"}}


class Ledger:
    """What the server acknowledged: quote id -> (name, acknowledged revision numbers)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.quotes: dict[int, tuple[str, set[int]]] = {}
        self.acks = 0
        self.refused: dict[int, int] = {}
        self.transport_errors = 0

    def saved(self, item_id: int, name: str) -> None:
        with self.lock:
            self.quotes[item_id] = (name, {1})
            self.acks += 1

    def recomputed(self, item_id: int, number: int) -> None:
        with self.lock:
            self.quotes[item_id][1].add(number)
            self.acks += 1


def writer(base: str, key: str, ledger: Ledger, tag: str, stop: threading.Event, rng: random.Random) -> None:
    mine: list[int] = []
    with httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=30) as client:
        n = 0
        while not stop.is_set():
            try:
                if mine and rng.random() < 0.4:
                    item_id = rng.choice(mine)
                    r = client.post(f"/api/v1/quotes/{item_id}/recompute")
                    if r.status_code == 200:
                        ledger.recomputed(item_id, r.json()["new_revision"])
                    else:
                        with ledger.lock:
                            ledger.refused[r.status_code] = ledger.refused.get(r.status_code, 0) + 1
                else:
                    name = f"{tag}-{n}"
                    n += 1
                    r = client.post("/api/v1/quotes", json={"name": name, "customer": "durability", "inputs": INPUTS,
                                                            "chosen_option": "dell-xe9680-h100", "server_count": 1,
                                                            "price": "1"})
                    if r.status_code == 201:
                        ledger.saved(r.json()["id"], name)
                        mine.append(r.json()["id"])
                    else:
                        with ledger.lock:
                            ledger.refused[r.status_code] = ledger.refused.get(r.status_code, 0) + 1
            except httpx.TransportError:
                with ledger.lock:
                    ledger.transport_errors += 1
                if stop.is_set():
                    return
                time.sleep(0.05)


def verify(base: str, ledger: Ledger) -> dict[str, int]:
    lost = gaps = checked = 0
    with httpx.Client(base_url=base, timeout=60) as client:
        for item_id, (name, numbers) in sorted(ledger.quotes.items()):
            r = client.get(f"/api/v1/quotes/{item_id}.json")
            checked += 1
            if r.status_code != 200 or r.json().get("name") != name:
                lost += len(numbers)
                continue
            stored = sorted(rev["number"] for rev in r.json()["revisions"])
            lost += len(numbers - set(stored))
            gaps += stored != list(range(1, len(stored) + 1))
    return {"quotes_checked": checked, "acknowledged_lost": lost, "quotes_with_revision_gaps": gaps}


def fresh_postgres(server_url: str) -> str:
    url = make_url(server_url).set(drivername="postgresql+psycopg")
    name = f"capplan_durability_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def run_database(label: str, database_url: str, workdir: Path, rounds: int, writers: int,
                 rng: random.Random) -> dict[str, Any]:
    key = _server.make_key(database_url, f"durability-{label}")
    ledger = Ledger()
    log = workdir / f"server-{label}.log"
    kills = []
    checks = []
    for round_no in range(1, rounds + 2):
        port = _server.free_port()
        process = _server.start(database_url, port, log)
        _server.wait_ready(process, port, log)
        base = f"http://{_server.HOST}:{port}"
        checks.append({"after_round": round_no - 1, **verify(base, ledger)})
        if round_no > rounds:  # the last server only reads back
            process.terminate()
            process.wait(timeout=30)
            break
        stop = threading.Event()
        threads = [threading.Thread(target=writer, args=(base, key, ledger, f"{label}-r{round_no}-w{i}", stop,
                                                         random.Random(rng.random())), daemon=True)
                   for i in range(writers)]
        acks_before = ledger.acks
        for t in threads:
            t.start()
        delay = rng.uniform(2, 6)
        time.sleep(delay)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        kills.append({"round": round_no, "killed_after_s": round(delay, 2), "acknowledged": ledger.acks - acks_before})
        print(f"{label} round {round_no}: SIGKILL after {delay:.1f} s, {ledger.acks - acks_before} writes "
              "acknowledged", flush=True)
    lost = sum(c["acknowledged_lost"] for c in checks)
    return {"database": label, "rounds": kills, "checks": checks, "acknowledged_total": ledger.acks,
            "quotes": len(ledger.quotes), "acknowledged_lost": lost, "refused": ledger.refused,
            "transport_errors": ledger.transport_errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres-url", help="a PostgreSQL server (a fresh database is made on it)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="capplan-durability-"))
    targets = [("sqlite", f"sqlite:///{workdir / 'durability.db'}")]
    if args.postgres_url:
        targets.append(("postgres", fresh_postgres(args.postgres_url)))
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    results = [run_database(label, url, workdir, args.rounds, args.writers, rng) for label, url in targets]
    report = {"date_utc": started, "cpus": os.cpu_count(), "writers": args.writers, "results": results}
    print(json.dumps([{k: r[k] for k in ("database", "acknowledged_total", "quotes", "acknowledged_lost")}
                      for r in results], indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
