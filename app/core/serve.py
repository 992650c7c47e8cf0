"""How ``capplan serve`` (and so the Docker image) runs uvicorn: timeouts for slow clients, a connection cap.

uvicorn times out idle keep-alive connections (``timeout_keep_alive``) but not a client that opens a connection
and never finishes its headers: such a connection (slowloris) stays open for ever, one of a few thousand file
descriptors. :class:`HeaderTimeoutProtocol` is uvicorn's own h11 protocol with one addition: from a
connection's first moment, and again from the first byte of each later request, the headers must be complete
within ``CAPPLAN_HEADER_TIMEOUT_S``, else the server answers 408 and closes the connection (what nginx's
``client_header_timeout`` does). A body that stalls is the app's business (app.admission: 408 after
``CAPPLAN_BODY_TIMEOUT_S`` without a chunk); so is a body too large (413).

uvicorn's httptools protocol (C parser, llhttp) costs about half the h11 one's per request, so when httptools is
installed (a dependency) :class:`HttpToolsHeaderTimeoutProtocol` adds the same header timeout to it, and
:func:`uvicorn_options` picks it (issue 19: within 2x of a bare endpoint); the h11 one stays for ``h11=True``.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.core.settings import Settings

__all__ = ["HeaderTimeoutProtocol", "HttpToolsHeaderTimeoutProtocol", "uvicorn_options"]

_TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


class _HeaderTimer:
    """The header timer both protocols share: armed by the protocol while a request's headers are due,
    disarmed when they are in (or the connection is lost); when it fires while the headers are still due
    (:meth:`_headers_due`), a 408 and close. The timeout is a keyword of the constructor (``header_timeout_s``),
    bound by :func:`uvicorn_options` with :func:`functools.partial`: a module-level class and a partial of it
    pickle by reference, which ``capplan serve --workers N`` needs (uvicorn pickles its config into each spawned
    worker; a class built at run time cannot be pickled)."""

    header_timeout_s: float = 10.0

    def __init__(self, *args: Any, header_timeout_s: float = 10.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s
    _header_timer: asyncio.TimerHandle | None = None
    loop: Any
    transport: Any
    logger: Any

    def _headers_due(self) -> bool:
        raise NotImplementedError

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._headers_due():
            return
        self.logger.info("closing a connection whose request headers did not arrive in %g s", self.header_timeout_s)
        self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


class HeaderTimeoutProtocol(_HeaderTimer, H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request headers do not arrive in time."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE and not self._busy():
            if self._header_timer is None:
                self._arm()  # the first bytes of a request: its headers must follow in time
        else:
            self._disarm()  # the headers are in (or the connection is done): the app's timeouts apply

    def _busy(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _headers_due(self) -> bool:
        return not self._busy() and self.conn.their_state is h11.IDLE


class HttpToolsHeaderTimeoutProtocol(_HeaderTimer, HttpToolsProtocol):
    """uvicorn's httptools protocol with the same header timeout: armed when a connection opens, and when
    the parser has seen the first bytes of a request (``on_message_begin``) but a read ended before its
    headers did; disarmed when the headers are complete. A request that arrives whole in one read (the
    usual case) never creates a timer."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._in_headers = True  # from a connection's first moment, the first request's headers must come
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_headers and self._header_timer is None and not self.transport.is_closing():
            self._arm()  # a request began in this read and its headers are not complete yet

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm()
        super().on_headers_complete()

    def _headers_due(self) -> bool:
        return self._in_headers


def uvicorn_options(settings: Settings, *, h11: bool = False) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` from the settings: the header timeout (a protocol subclass with
    the setting bound: httptools', or h11's with ``h11``), the keep-alive timeout, and a cap on open
    connections just above what the app's queue can hold (uvicorn answers 503 to connections beyond it).
    Everything returned pickles (``--workers N`` spawns its workers with the config pickled)."""
    base: type[HeaderTimeoutProtocol | HttpToolsHeaderTimeoutProtocol] = (
        HeaderTimeoutProtocol if h11 else HttpToolsHeaderTimeoutProtocol)
    protocol = functools.partial(base, header_timeout_s=settings.header_timeout_s)
    return {
        "http": protocol,
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "limit_concurrency": settings.max_concurrent_requests + settings.max_queued_requests + 64,
    }
