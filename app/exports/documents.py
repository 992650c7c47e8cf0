"""The export documents of a quote or plan: JSON (every revision), CSV and printable HTML (one revision)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from app.core.i18n import gettext, ngettext, using_locale
from app.exports.csv_safe import safe_writer
from app.exports.flatten import flatten
from app.exports.quote import display_names, quote_sections
from app.models import SavedItem, SavedRevision
from app.schemas.saved import RevisionOut, SavedSummary

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["csv_document", "json_document", "pdf_document", "print_document"]

_ENV = Environment(
    loader=FileSystemLoader(Path(__file__).resolve().parent / "templates"),
    autoescape=select_autoescape(default=True),
    extensions=["jinja2.ext.i18n"],
)
_ENV.install_gettext_callables(gettext, ngettext, newstyle=True)  # type: ignore[attr-defined]


def json_document(item: SavedItem) -> dict[str, Any]:
    return {
        **SavedSummary.of(item).model_dump(mode="json"),
        "revisions": [RevisionOut.of(r).model_dump(mode="json") for r in item.revisions],
    }


def _header(item: SavedItem, rev: SavedRevision) -> list[tuple[str, Any]]:
    return [
        ("id", item.id), ("kind", item.kind), ("name", item.name), ("customer", item.customer),
        ("revision", rev.number), ("revision_reason", rev.reason), ("created_at", rev.created_at.isoformat()),
        ("created_by", rev.created_by), ("chosen_option", rev.chosen_option), ("server_count", rev.server_count),
        ("price", rev.price), ("currency", rev.currency), ("notes", rev.notes),
        ("estimator_version", rev.estimator_version), ("catalog_version", rev.catalog_version),
    ]


def csv_document(item: SavedItem, rev: SavedRevision) -> str:
    """``field,value`` rows: the quote, then ``inputs.*`` and ``result.*`` flattened (then ``serving_inputs.*`` and
    ``serving_result.*`` when the quote has a serving line); formula-like cells
    neutralised (:mod:`app.exports.csv_safe`)."""
    out = io.StringIO()
    writer = safe_writer(out, lineterminator="\n")
    writer.writerow(["field", "value"])
    writer.writerows(_header(item, rev))
    writer.writerows(flatten(rev.inputs, "inputs"))
    writer.writerows(flatten(rev.result, "result"))
    if rev.serving_inputs is not None:  # only quotes with a serving line get these rows
        writer.writerows(flatten(rev.serving_inputs, "serving_inputs"))
        writer.writerows(flatten(rev.serving_result, "serving_result"))
    return out.getvalue()


def print_document(item: SavedItem, rev: SavedRevision, catalog: Catalog | None = None,
                   locale: str | None = None) -> str:
    """The customer-ready quote (app/exports/quote.py) as printable HTML: display names from ``catalog``, words,
    numbers, money and dates in ``locale`` (English by default; ``pt_BR``)."""
    names = display_names(catalog)
    with using_locale(locale) as chosen:
        return _ENV.get_template("quote_print.html").render(item=item, rev=rev, q=quote_sections(rev, names, catalog),
                                                            lang=chosen.replace("_", "-"), when=_when(rev))


def _when(rev: SavedRevision) -> str:
    from babel.dates import format_datetime

    from app.core.i18n import current

    if current() == "en":
        return rev.created_at.strftime("%Y-%m-%d %H:%M UTC")
    return str(format_datetime(rev.created_at, format="medium", locale=current())) + " UTC"


def pdf_document(item: SavedItem, rev: SavedRevision, catalog: Catalog | None = None,
                 locale: str | None = None) -> bytes:
    """The same quote as a PDF, laid out by WeasyPrint (Pango) from the printable HTML."""
    from weasyprint import HTML

    pdf: bytes = HTML(string=print_document(item, rev, catalog, locale)).write_pdf()
    return pdf
