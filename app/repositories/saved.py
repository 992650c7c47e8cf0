"""Quotes and saved plans (``saved_items``) and their immutable revisions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from app.models import SavedItem, SavedRevision, search_key, utcnow

__all__ = ["MAX_OFFSET", "add_revision", "create_item", "get_item", "get_revision", "list_items", "soft_delete"]

#: the deepest a list can page (API ``offset``; the pages' ``page`` is bounded to reach no further)
MAX_OFFSET = 1_000_000


def create_item(*, session: Session, kind: str, name: str, customer: str | None, actor: str,
                revision: dict[str, Any]) -> SavedItem:
    item = SavedItem(kind=kind, name=name, customer=customer, created_by=actor, latest_revision=1)
    item.revisions.append(SavedRevision(number=1, reason="created", created_by=actor, diff=None, **revision))
    session.add(item)
    session.flush()
    return item


def get_item(*, session: Session, kind: str, item_id: int, for_update: bool = False) -> SavedItem | None:
    """The live (not deleted) item with its revisions, or ``None``. ``for_update`` locks its row until the
    transaction ends (``SELECT ... FOR UPDATE`` on PostgreSQL, so concurrent writers of one item take turns;
    SQLite has no row locks, and writers there rely on the unique revision number and retry)."""
    query = (select(SavedItem)
             .where(SavedItem.id == item_id, SavedItem.kind == kind, SavedItem.deleted_at.is_(None))
             .options(selectinload(SavedItem.revisions)))
    if for_update:
        query = query.with_for_update(of=SavedItem).execution_options(populate_existing=True)
    return session.scalar(query)


def get_revision(item: SavedItem, number: int | None) -> SavedRevision | None:
    """Revision ``number`` of ``item`` (the latest when ``None``), or ``None`` when it has no such revision."""
    if number is None:
        return item.revisions[-1]
    return next((rev for rev in item.revisions if rev.number == number), None)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def list_items(*, session: Session, kind: str, customer: str | None, name: str | None, limit: int,
               offset: int) -> tuple[list[SavedItem], int]:
    """Newest first. ``customer`` matches the whole customer name, ``name`` any part of the name, both ignoring
    case in every script (compared on the stored :func:`~app.models.search_key` columns)."""
    query = select(SavedItem).where(SavedItem.kind == kind, SavedItem.deleted_at.is_(None))
    if customer is not None:
        query = query.where(SavedItem.customer_key == search_key(customer))
    if name is not None:
        query = query.where(SavedItem.name_key.like(f"%{_escape_like(search_key(name))}%", escape="\\"))
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(SavedItem.id.desc()).limit(limit).offset(offset))
    return list(rows), int(total)


def add_revision(*, session: Session, item: SavedItem, actor: str, diff: list[Any],
                 revision: dict[str, Any]) -> SavedRevision:
    number = item.latest_revision + 1
    rev = SavedRevision(number=number, reason="recomputed", created_by=actor, diff=diff, **revision)
    item.revisions.append(rev)
    item.latest_revision = number
    session.flush()
    return rev


def soft_delete(*, item: SavedItem, actor: str) -> None:
    """Hide the item from every read; its rows and revisions stay for the audit trail."""
    item.deleted_at, item.deleted_by = utcnow(), actor
