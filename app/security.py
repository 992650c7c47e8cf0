"""API keys: ``cpk_<prefix>_<secret>``. Only the prefix (for lookup), a random salt and
``sha256(salt + secret)`` are stored; the full key is shown once, when it is created."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

__all__ = ["NewKey", "hash_secret", "new_key", "split_key", "verify"]

_SCHEME = "cpk"
#: what ``new_key`` makes (``token_hex(6)``); nothing else is looked up in the database
_PREFIX = re.compile(r"[0-9a-f]{1,16}")


@dataclass(frozen=True)
class NewKey:
    plaintext: str
    prefix: str
    salt: str
    key_hash: str


def hash_secret(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


def new_key() -> NewKey:
    prefix, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_hex(16)
    return NewKey(f"{_SCHEME}_{prefix}_{secret}", prefix, salt, hash_secret(salt, secret))


def split_key(presented: str) -> tuple[str, str] | None:
    """``(prefix, secret)`` of a well-formed key, else ``None``."""
    parts = presented.strip().split("_", 2)
    if len(parts) != 3 or parts[0] != _SCHEME or not _PREFIX.fullmatch(parts[1]) or not parts[2]:
        return None
    return parts[1], parts[2]


def verify(salt: str, key_hash: str, secret: str) -> bool:
    return hmac.compare_digest(hash_secret(salt, secret), key_hash)
