"""What the app (and ``capplan db upgrade``) does to a database before serving: migrate, then seed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.core.migrate import upgrade
from app.repositories.catalog import SeedReport, seed_catalog

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["load_source_catalog", "prepare_database"]

log = logging.getLogger("capplan.startup")


def load_source_catalog() -> Any:
    """The hardware catalog shipped with capplan (``hardware_catalog`` YAML)."""
    from hardware_catalog import load_catalog

    return load_catalog()


def prepare_database(engine: Engine, catalog: Catalog, *, migrate: bool = True, seed: bool = True) -> SeedReport | None:
    if migrate:
        upgrade(engine)
    if not seed:
        return None
    with Session(engine) as session:
        report = seed_catalog(session=session, catalog=catalog)
        session.commit()
    log.info("catalog %s: %d added, %d changed, %d unchanged, %d conflicts", report.version, report.added,
             report.changed, report.unchanged, len(report.conflicts))
    return report
