"""The pages in English and Brazilian Portuguese: gettext catalogs (Babel), chosen per request.

The locale of a request is the ``capplan_lang`` cookie when it names a known one (set by the switch in the
page header, ``GET /lang/{code}``), else the best match of ``Accept-Language`` (``babel.negotiate_locale``),
else English. :func:`use_locale` (a dependency of every page) puts it in a context variable that
:func:`gettext`, the Jinja2 i18n extension and the number filters read. Only the pages are translated: the
API's problem ``detail`` and the JSON (the estimator's messages included) stay English (a stable contract).

Catalogs: ``app/locale/<locale>/LC_MESSAGES/messages.po``, read with ``babel.messages.pofile`` and compiled in
memory on first use (no ``.mo`` to keep in step). The estimator's own messages (``estimator.messages.Text``:
English, with their template and parameters) are shown with :func:`translate`: the template through the
catalog, the numbers with the locale's separators. ``babel.cfg`` at the repository root says where the messages
are extracted from and ``scripts/i18n-update`` re-extracts and merges them; ``tests/test_i18n.py`` fails on
any extracted message without a pt-BR translation.
"""

from __future__ import annotations

import contextvars
import io
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from babel import negotiate_locale
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_currency, get_decimal_symbol, get_group_symbol
from babel.support import NullTranslations, Translations
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

from estimator.messages import Money, Num, Text

__all__ = ["COOKIE", "DEFAULT", "LOCALES", "N_", "current", "gettext", "localize_number", "negotiate", "ngettext",
           "router", "translate", "use_locale"]

DEFAULT = "en"
LOCALES: dict[str, str] = {"en": "English", "pt_BR": "Português (Brasil)"}
COOKIE = "capplan_lang"
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"  # app/locale
_current: contextvars.ContextVar[str] = contextvars.ContextVar("capplan_locale", default=DEFAULT)

router = APIRouter()


def N_(message: str) -> str:
    """Marks a message for extraction where it is defined; it is translated where it is shown."""
    return message


@cache
def _translations(locale: str) -> Translations | NullTranslations:
    """The locale's catalog as gettext translations: the ``.po`` read by Babel and compiled in memory (fuzzy and
    untranslated messages left out, so they show in English), with the catalog's own plural rule."""
    path = LOCALE_DIR / locale / "LC_MESSAGES" / "messages.po"
    if not path.is_file():
        return NullTranslations()
    with path.open("rb") as f:
        catalog = read_po(f, locale=locale)
    buffer = io.BytesIO()
    write_mo(buffer, catalog)
    buffer.seek(0)
    return Translations(fp=buffer)


def current() -> str:
    return _current.get()


@contextmanager
def using_locale(locale: str | None) -> Iterator[str]:
    """Render in ``locale`` (a known one, else English) for the block: a customer document asked in Portuguese
    from an API route, which has no page locale of its own."""
    chosen = locale if locale in LOCALES else DEFAULT
    token = _current.set(chosen)
    try:
        yield chosen
    finally:
        _current.reset(token)


def gettext(message: str) -> str:
    locale = _current.get()
    return message if locale == DEFAULT else str(_translations(locale).gettext(message))


def ngettext(singular: str, plural: str, n: int) -> str:
    locale = _current.get()
    if locale == DEFAULT:
        return singular if n == 1 else plural
    return str(_translations(locale).ngettext(singular, plural, n))


def localize_number(text: object) -> str:
    """An English-formatted number (``1,157.5``) with the request's locale's separators (Babel's CLDR symbols:
    ``1.157,5`` in pt-BR); other characters are kept."""
    locale = _current.get()
    if locale == DEFAULT:
        return str(text)
    group, decimal = get_group_symbol(locale), get_decimal_symbol(locale)
    return "".join(group if c == "," else decimal if c == "." else c for c in str(text))


def _param(value: Any) -> str:
    if isinstance(value, Text):
        return translate(value)
    if isinstance(value, Num):
        return localize_number(str(value))
    if isinstance(value, Money):
        from app.core.currency import current as current_currency

        digits = value.spec.rsplit(".", 1)[-1].rstrip("f") if "." in value.spec else "0"
        pattern = "¤ #,##0" + ("." + "0" * int(digits or 0) if int(digits or 0) else "")
        shown = current_currency()
        return str(format_currency(value.value * shown.per_usd, shown.code, format=pattern, locale=_current.get(),
                                   currency_digits=False))
    return str(value)


def translate(message: str) -> str:
    """A message in the request's locale: an estimator ``Text`` through its template (its parameters formatted
    for the locale, clauses translated in turn), a joined one part by part, any other string as a catalog
    message id (itself when the catalog does not have it)."""
    if _current.get() == DEFAULT:
        return str(message)
    if isinstance(message, Text):
        if message.parts:
            sep = gettext(message.sep) if message.sep else ""
            shown = sep.join(translate(p) for p in message.parts)
            return shown[:1].upper() + shown[1:] if message.upper_first else shown
        template = gettext(message.template)
        return template % {k: _param(v) for k, v in message.params.items()} if message.params else template
    return gettext(message)


def _accept_language(header: str) -> list[str]:
    """Language tags of an ``Accept-Language`` header, best first (``q=0`` dropped)."""
    scored = []
    for i, part in enumerate(header.split(",")):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        if tag and q > 0:
            scored.append((-q, i, tag.strip().replace("-", "_")))
    return [tag for _, _, tag in sorted(scored)]


def negotiate(request: Request) -> str:
    chosen = request.cookies.get(COOKIE)
    if chosen in LOCALES:
        return str(chosen)
    preferred = _accept_language(request.headers.get("accept-language", ""))
    # a bare "pt" reader gets the Brazilian catalog: it is the only Portuguese one
    preferred = [p if p.lower() != "pt" else "pt_BR" for p in preferred]
    found = negotiate_locale(preferred, list(LOCALES), sep="_")
    return found if found in LOCALES else DEFAULT


async def use_locale(request: Request) -> None:
    """Page dependency: the request's locale for everything rendered while it is handled."""
    locale = negotiate(request)
    _current.set(locale)
    request.state.locale = locale


def _safe_next(target: str) -> str:
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


@router.get("/lang/{code}", name="set_language")
def set_language(code: str, next: str = "/") -> RedirectResponse:
    """The visible switch: keep the choice in a cookie (a year) and go back to the page it was made on."""
    response = RedirectResponse(_safe_next(next), status_code=303)
    if code in LOCALES:
        response.set_cookie(COOKIE, code, max_age=365 * 86400, samesite="lax", httponly=True)
    return response
