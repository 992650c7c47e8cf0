"""API key rows: create (returns the plaintext once), list, revoke, authenticate."""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.models import ApiKey, utcnow
from app.security import new_key, split_key, verify

__all__ = ["KeyExistsError", "authenticate", "create_key", "list_keys", "revoke_key"]


class KeyExistsError(ValueError):
    """A key with that name already exists."""


def create_key(*, session: Session, name: str, rate_limit: str | None = None) -> tuple[ApiKey, str]:
    if session.scalar(select(ApiKey).where(ApiKey.name == name)) is not None:
        raise KeyExistsError(f"an API key named {name!r} already exists")
    key = new_key()
    row = ApiKey(name=name, prefix=key.prefix, salt=key.salt, key_hash=key.key_hash, rate_limit=rate_limit)
    session.add(row)
    session.flush()
    return row, key.plaintext


def list_keys(*, session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.id)))


def revoke_key(*, session: Session, name_or_prefix: str) -> ApiKey | None:
    """Revoke the key with that name or prefix; ``None`` if there is none. Revoking twice keeps the first time."""
    row = session.scalar(
        select(ApiKey).where(or_(ApiKey.name == name_or_prefix, ApiKey.prefix == name_or_prefix))
    )
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
    return row


def authenticate(*, session: Session, presented: str) -> ApiKey | None:
    """The live key matching ``presented``, or ``None`` (malformed, unknown or revoked)."""
    parts = split_key(presented)
    if parts is None:
        return None
    row = session.scalar(select(ApiKey).where(ApiKey.prefix == parts[0]))
    if row is None or row.revoked_at is not None or not verify(row.salt, row.key_hash, parts[1]):
        return None
    return row
