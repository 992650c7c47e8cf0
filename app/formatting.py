"""Money, counts and percentages for people: one helper for the pages, the exports and the quote, on Babel
(``babel.numbers``, CLDR data) in English (``en_US``).

- money: "$2.09", "-$2.09" (the sign before the symbol, never "$-2.09"), whole dollars from $100 up
  ("$9,075", "-$9,075"), cents below so that $0.08 is not shown as $0;
- counts: whole numbers with separators ("32,792 runs", never "32,791.5 runs");
- percentages: "80%" ("12.5%" with ``digits=1``);
- a catalog range: a single price when low and high agree ("$15,000", never "$15,000-$15,000").
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from babel.numbers import NumberFormatError, format_currency, format_decimal, format_percent, parse_decimal

__all__ = ["LOCALE", "count", "money", "money_range", "parse_count", "parse_number", "percent", "price", "rate"]

LOCALE = "en_US"


def _finite(value: float | None) -> bool:
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def money(value: float | None, currency: str = "USD", locale: str = LOCALE) -> str:
    """Whole units from 100 up, cents below; ``n/a`` for a missing value. ``locale``: the separators and the
    symbol's spacing ("$2.09" in English, "US$ 2,09" in pt-BR)."""
    if not _finite(value):
        return "n/a"
    assert value is not None
    return _currency(value, currency, 0 if abs(value) >= 100 else 2, locale)


def rate(value: float | None, currency: str = "USD", locale: str = LOCALE) -> str:
    """A price per unit (per GPU-hour): always with cents ("$2.23", "-$2.09")."""
    if not _finite(value):
        return "n/a"
    assert value is not None
    return _currency(value, currency, 2, locale)


def _currency(value: float, currency: str, digits: int, locale: str) -> str:
    """``value`` in ``currency`` with ``digits`` decimals: the symbol against the number in English, a space
    between them elsewhere (CLDR's own pattern for pt-BR)."""
    symbol = "¤" if locale == LOCALE else "¤ "
    pattern = symbol + "#,##0" + ("." + "0" * digits if digits else "")
    return str(format_currency(value, currency, format=pattern, locale=locale, currency_digits=False))


def price(value: float | None, currency: str = "USD") -> str:
    """A quoted price, to the cent ("$399,999.99", "€1,200.00")."""
    return rate(value, currency)


def count(value: float | None) -> str:
    """A whole number with thousands separators (rounded half to even, as Babel does)."""
    if not _finite(value):
        return "n/a"
    assert value is not None
    return str(format_decimal(round(value), format="#,##0", locale=LOCALE))


def percent(value: float | None, digits: int = 0) -> str:
    """A share (0.8) as a percentage ("80%")."""
    if not _finite(value):
        return "n/a"
    assert value is not None
    pattern = "#,##0%" if digits <= 0 else "#,##0." + "0" * digits + "%"
    return str(format_percent(value, format=pattern, locale=LOCALE))


def money_range(low: float | None, high: float | None, currency: str = "USD") -> str:
    """One price when the range is a single value, else "low-high"."""
    if not _finite(low) and not _finite(high):
        return "n/a"
    if not _finite(low) or not _finite(high) or low == high:
        return money(low if _finite(low) else high, currency)
    return f"{money(low, currency)}-{money(high, currency)}"


#: token-count suffixes people type ("1B", "1.5T", "500M", "20k"); G is the SI giga the pages print
_SUFFIX = {"k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def parse_number(raw: str, locale: str = LOCALE) -> Decimal:
    """A number as a person types it in ``locale`` (Babel, CLDR separators): "12,500.50" in English,
    "12.500,50" in pt-BR; a plain "1727.05" or "1e9" is read as written. ``ValueError`` when it is not one."""
    text = raw.strip().replace("\u00a0", "").replace(" ", "").replace("_", "")
    if not text:
        raise ValueError("empty")
    try:
        if re.fullmatch(r"[-+]?\d+(\.\d+)?([eE][-+]?\d+)?", text) and not _grouped(text, locale):
            return Decimal(text)
        return Decimal(parse_decimal(text, locale=locale, strict=True))
    except (NumberFormatError, InvalidOperation) as exc:
        raise ValueError(f"not a number: {raw!r}") from exc


def _grouped(text: str, locale: str) -> bool:
    """"1.500" is one and a half in English but fifteen hundred where "." groups thousands (pt-BR)."""
    from babel.numbers import get_group_symbol

    return get_group_symbol(locale) == "." and re.fullmatch(r"\d{1,3}(\.\d{3})+", text) is not None


def parse_count(raw: str, locale: str = LOCALE) -> int:
    """A whole count (tokens) as typed: "1B", "1.5 T", "500M", "1,000,000,000" (English), "1.000.000.000"
    (pt-BR), "1e9". ``ValueError`` when it is not a whole number."""
    text = raw.strip().replace(" ", "")
    factor = 1
    if text and text[-1].lower() in _SUFFIX and not text.lower().endswith("e"):
        factor, text = _SUFFIX[text[-1].lower()], text[:-1]
    value = parse_number(text, locale) * factor
    if value != value.to_integral_value():
        raise ValueError(f"not a whole number: {raw!r}")
    return int(value)
