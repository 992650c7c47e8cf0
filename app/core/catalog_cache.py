"""The effective hardware catalog: seeded data updated by sales overrides, plus custom entries.

Estimates, comparisons and quotes run against this catalog, so an override or a custom server takes effect
at once. Its ``version`` is the source catalog's version, suffixed ``+db.<hash>`` when overrides or custom
entries change anything, so a saved quote records exactly which data it used.

Checking the rows costs a database round trip (and, from an async route, a thread-pool hop), so
:meth:`CatalogCache.current` answers from memory while nothing can have changed: a commit in this process that
wrote a catalog row bumps :data:`generation` (an ORM event, whichever code path wrote it), which sends the next
request to the database; changes made by another process (a second worker, ``capplan catalog`` on the same
database) are seen at the next check, at most ``refresh_s`` seconds later (``CAPPLAN_CATALOG_REFRESH_S``,
default 5 s; 0 checks on every request).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.catalog_kinds import KINDS, Kind, source_items
from app.models import CatalogEntry
from app.repositories.catalog import catalog_fingerprint, list_entries

__all__ = ["CatalogCache", "build_effective", "catalog_generation", "entry_model"]

log = logging.getLogger("capplan.catalog")

_CLASS_NAMES: dict[Kind, str] = {"gpu": "Gpu", "server": "Server", "cloud_offer": "CloudOffer"}


def entry_model(source: Any, kind: Kind) -> type[BaseModel]:
    """The pydantic model of ``kind``: the type of the source catalog's entries, else the catalog package's."""
    items = list(source_items(source, kind).values())
    if items:
        return type(items[0])
    import hardware_catalog

    cls = getattr(hardware_catalog, _CLASS_NAMES[kind], None)
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return cls
    raise LookupError(f"cannot tell the model of {kind} entries")


def _validated(cls: type[BaseModel], row: CatalogEntry) -> BaseModel | None:
    try:
        return cls.model_validate(row.effective)
    except ValidationError:
        log.warning("%s %r: overrides no longer valid; using its %s data", row.kind, row.entry_id, row.origin)
    try:
        return cls.model_validate(row.data)
    except ValidationError:
        log.warning("%s %r: no longer valid; left out of the effective catalog", row.kind, row.entry_id)
        return None


def _version(source: Any, rows: list[CatalogEntry]) -> str:
    changed = sorted(
        (r.kind, r.entry_id, r.effective) for r in rows if r.overrides or r.origin == "custom"
    )
    if not changed:
        return str(source.version)
    digest = hashlib.sha256(json.dumps(changed, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{source.version}+db.{digest}"


def _rebuild(source: Any, fields: dict[str, Any]) -> Any:
    if isinstance(source, BaseModel):
        return source.model_copy(update=fields)
    return dataclasses.replace(source, **fields)


def build_effective(source: Any, rows: list[CatalogEntry]) -> Any:
    """A catalog of the same type as ``source`` holding the effective value of every row."""
    fields: dict[str, Any] = {}
    for kind, attr in KINDS.items():
        kind_rows = [r for r in rows if r.kind == kind]
        cls = entry_model(source, kind) if kind_rows else None
        items = {r.entry_id: m for r in kind_rows if cls and (m := _validated(cls, r)) is not None}
        original = getattr(source, attr, None)
        fields[attr] = items if isinstance(original, dict) else list(items.values())
    fields["version"] = _version(source, rows)
    return _rebuild(source, fields)


class CatalogCache:
    """The effective catalog, built once per catalog change; requests read it without touching the database.

    A commit that changed catalog rows in this process (seen by :func:`_note_catalog_writes`) makes the next
    request look at once; changes made by other processes (other workers, ``capplan`` commands) are looked for
    at most every ``refresh_s`` seconds, with one cheap query (:func:`catalog_fingerprint`) on a short session of
    its own, so no request holds a pooled connection for the catalog. While one request looks, the others use
    the catalog they have; only the very first build is waited for.
    """

    def __init__(self, source: Any, refresh_s: float = 5.0) -> None:
        self.source = source
        self.refresh_s = refresh_s
        self.checks = 0  # fingerprint queries made (tests and benchmarks read it)
        self._key: tuple[int, str] | None = None
        self._catalog: Any = None
        self._seen_generation = -1
        self._next_check = 0.0
        self._lock = threading.Lock()

    def fresh(self) -> Any | None:
        """The effective catalog when it needs no check now (nothing written in this process since the last
        check, which was less than ``refresh_s`` ago), else ``None``: call :meth:`get` (or :meth:`current`)."""
        return self._catalog if self._fresh() else None

    def current(self, sessionmaker: Callable[[], Session]) -> Any:
        """:meth:`fresh`, else :meth:`get` on a session of its own (blocking: run it in a worker thread)."""
        catalog = self.fresh()
        if catalog is not None:
            return catalog
        with sessionmaker() as session:
            return self.get(session)

    def _fresh(self) -> bool:
        return (self._catalog is not None and self._seen_generation == _generation[0]
                and time.monotonic() < self._next_check)

    def get(self, session: Session) -> Any:
        if self._fresh():
            return self._catalog
        if not self._lock.acquire(blocking=self._catalog is None):
            return self._catalog  # another request is looking; this one keeps the current catalog
        try:
            if not self._fresh():
                try:
                    self._refresh(session)
                except SQLAlchemyError:
                    if self._catalog is None:
                        raise
                    # the database is busy or away: keep serving the catalog we have, look again later
                    log.warning("catalog refresh failed; using the catalog of the last check", exc_info=True)
                    self._next_check = time.monotonic() + self.refresh_s
            return self._catalog
        finally:
            self._lock.release()

    def _refresh(self, session: Session) -> None:
        generation = _generation[0]
        with Session(bind=session.get_bind()) as own:
            self.checks += 1
            key = catalog_fingerprint(session=own)
            if key != self._key or self._catalog is None:
                rows = list_entries(session=own)
                self._catalog = build_effective(self.source, rows) if rows else self.source
                self._key = key
        self._seen_generation = generation
        self._next_check = time.monotonic() + self.refresh_s


#: bumped by every commit that wrote catalog rows in this process (a list, so the listeners can change it)
_generation = [0]


def catalog_generation() -> int:
    """Bumped by every commit in this process that added, changed or deleted a catalog row."""
    return _generation[0]


@event.listens_for(Session, "after_flush")
def _note_catalog_writes(session: Session, _context: Any) -> None:
    if any(isinstance(o, CatalogEntry) for o in (*session.new, *session.dirty, *session.deleted)):
        session.info["capplan_catalog_changed"] = True


@event.listens_for(Session, "after_commit")
def _bump_generation(session: Session) -> None:
    if session.info.pop("capplan_catalog_changed", False):
        _generation[0] += 1


@event.listens_for(Session, "after_rollback")
def _forget_writes(session: Session) -> None:
    session.info.pop("capplan_catalog_changed", None)
