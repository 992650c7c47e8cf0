"""Source links: only ``http`` and ``https`` URLs with a host are links; anything else (``javascript:``,
``vbscript:``, ``data:``, ``file:``, a relative path) is refused on input and never rendered as a link.

OWASP Cross Site Scripting Prevention Cheat Sheet, rule 5 ("URL encode ... and validate the URL scheme"): a
link's ``href`` must be checked against an allow-list of schemes, as HTML escaping does not stop
``javascript:`` URLs. Browsers ignore leading control characters and spaces and tabs or newlines inside a
scheme (WHATWG URL standard, "basic URL parser"), so the check refuses every control character and
whitespace rather than trying to parse the scheme the way a browser would.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

__all__ = ["WEB_SCHEMES", "WebUrl", "is_web_url", "web_url"]

WEB_SCHEMES = frozenset({"http", "https"})


def is_web_url(value: object) -> bool:
    """``value`` is a string ``http://host...`` or ``https://host...`` with no whitespace or control character."""
    if not isinstance(value, str) or not value:
        return False
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an unbalanced "[" in the host
        return False
    return parts.scheme.lower() in WEB_SCHEMES and bool(parts.netloc) and value.lower().startswith(
        tuple(f"{s}://" for s in WEB_SCHEMES)
    )


def web_url(value: object) -> str | None:
    """``value`` if it is a web URL (:func:`is_web_url`), else ``None``: what a template may put in ``href``."""
    return value if isinstance(value, str) and is_web_url(value) else None


def _check(value: str | None) -> str | None:
    if value is not None and not is_web_url(value):
        raise ValueError("must be an http:// or https:// URL with a host (no other scheme, no spaces)")
    return value


#: an optional link of a source: ``None`` or an ``http(s)://`` URL
WebUrl = Annotated[str | None, AfterValidator(_check)]
