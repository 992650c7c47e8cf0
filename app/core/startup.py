"""What the app (and ``capplan db upgrade``) does to a database before serving: migrate, then seed (the hardware
catalog, then the measurement records shipped with capplan)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.core.migrate import upgrade
from app.repositories.catalog import SeedReport, seed_catalog

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["frozen_heap", "load_source_catalog", "prepare_database"]

log = logging.getLogger("capplan.startup")


def load_source_catalog() -> Any:
    """The hardware catalog shipped with capplan (``hardware_catalog`` YAML)."""
    from hardware_catalog import load_catalog

    return load_catalog()


def prepare_database(engine: Engine, catalog: Catalog, *, migrate: bool = True, seed: bool = True) -> SeedReport | None:
    """Migrate (``migrate``), then (``seed``) bring the catalog rows up to date with ``catalog`` and add the
    shipped measurement records not stored yet (``app/data/measurements``: our ``capplan check --run`` records
    from a real GPU; :func:`~app.services.measurements.seed_measurements`, idempotent). The catalog's report,
    with the measurements' as its ``measurements``."""
    if migrate:
        upgrade(engine)
    if not seed:
        return None
    from app.services.measurements import seed_measurements, shipped_measurements

    with Session(engine) as session:
        report = seed_catalog(session=session, catalog=catalog)
        session.commit()
    log.info("catalog %s: %d added, %d changed, %d unchanged, %d conflicts", report.version, report.added,
             report.changed, report.unchanged, len(report.conflicts))
    with Session(engine) as session:
        report.measurements = seed_measurements(session=session, catalog=catalog, bodies=shipped_measurements())
        session.commit()
    m = report.measurements
    log.info("shipped measurements: %d added, %d already stored, %d left out%s", m.added, m.unchanged,
             len(m.left_out), (": " + "; ".join(m.left_out)) if m.left_out else "")
    return report


@contextmanager
def frozen_heap(enabled: bool = True) -> Iterator[None]:
    """While serving, the objects alive at start-up (modules, the catalog, the app: about 160,000) sit in the
    collector's permanent generation (``gc.freeze``), so a full collection no longer walks them: on the 2-core
    machine one took about 120 ms, a stall of every request in flight (issue 19, p99 at concurrency 8). Garbage
    is collected first so that none of it is kept for good; on shutdown the objects go back to the oldest
    generation (``gc.unfreeze``), so apps built and stopped in one process are still collected. The tests turn
    it off (``CAPPLAN_GC_FREEZE=0``: the full collection costs each app start about 0.1 s)."""
    if not enabled:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
