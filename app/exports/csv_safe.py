"""CSV cells that a spreadsheet will not run as formulas.

OWASP "CSV Injection": a cell beginning with ``=``, ``+``, ``-``, ``@``, a tab (0x09) or a carriage return
(0x0D) may be read as a formula by Excel, LibreOffice or Google Sheets (``=HYPERLINK(...)``,
``@SUM(...)``, ``-2+3+cmd|' /C calc'!A0``). Such a cell gets a leading single quote, which spreadsheets show
as text; the csv module's quoting then takes care of separators, quotes and line breaks inside the cell.
Numbers (int, float, Decimal) are written as they are: their text is a number, never a formula, and a
negative number stays a number.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, TextIO

__all__ = ["FORMULA_PREFIXES", "safe_cell", "safe_writer"]

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """``value`` as a CSV cell: text starting with a formula character is prefixed with ``'``."""
    if value is None or isinstance(value, int | float | Decimal):  # bool is an int
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


class _SafeWriter:
    """``csv.writer`` with every cell through :func:`safe_cell`."""

    def __init__(self, out: TextIO, **kwargs: Any) -> None:
        self._writer = csv.writer(out, **kwargs)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([safe_cell(v) for v in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def safe_writer(out: TextIO, **kwargs: Any) -> _SafeWriter:
    """A CSV writer (``csv.writer`` arguments) that neutralises formula cells."""
    return _SafeWriter(out, **kwargs)
