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

from babel.numbers import format_currency, format_decimal, format_percent

__all__ = ["LOCALE", "count", "money", "money_range", "percent", "price", "rate"]

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
