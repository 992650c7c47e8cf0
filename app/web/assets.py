"""Static files with content-hashed names, long-lived caching, brotli and gzip.

Pages link ``asset("css/app.css")`` -> ``/static/css/app.<12 hex of its sha256>.css``. :class:`AssetFiles` (the
``/static`` mount) serves such a name from the file it stands for, with ``Cache-Control: public,
max-age=31536000, immutable``: a changed file gets a new name, so a browser never has to revalidate. Plain names
(what the API docs pages and old links use) and names whose digest is not the file's current one (an old page
after a deploy) are served too, with ``Cache-Control: no-cache`` (revalidated through the ETag).

Text files (JavaScript, CSS, SVG, JSON, HTML) go out compressed when the client accepts it (``Accept-Encoding``):
brotli (quality 11, RFC 7932) when it is accepted, else gzip (level 9, ``mtime=0`` so the bytes are
reproducible). Each file is compressed once per process per encoding and kept in memory, keyed by path, size and
modification time; :meth:`AssetFiles.precompress` does the known heavy ones at start-up so the first visitor does
not wait for it. Brotli at quality 11 takes seconds for a large bundle, so those are compressed at build time
(``scripts/precompress-static`` writes ``<file>.br`` beside them); a ``.br`` file is used once it decompresses to
the file's current bytes, and a large file without one goes out gzipped. A 1.2 MB plotly bundle goes out as
about 395 KB gzipped, 329 KB with brotli.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import brotli
from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

__all__ = ["IMMUTABLE", "REVALIDATE", "AssetFiles", "asset_url", "digest_of"]

IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
DIGEST_LEN = 12
_HASHED = re.compile(rf"^(?P<stem>.+)\.(?P<digest>[0-9a-f]{{{DIGEST_LEN}}})(?P<ext>\.[A-Za-z0-9]+)$")
_COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml", "application/xml")
_MIN_SIZE = 1024
_STATIC = Path(__file__).resolve().parents[2] / "static"

_lock = threading.Lock()
_digests: dict[Path, tuple[int, int, str]] = {}
_compressed: dict[tuple[Path, str], tuple[int, int, bytes]] = {}
#: the encodings served, best first, and how each compresses a file's bytes
_CODECS = {"br": lambda data: brotli.compress(data, quality=11),
           "gzip": lambda data: gzip.compress(data, compresslevel=9, mtime=0)}
_BROTLI_ON_DEMAND = 256 * 1024  # larger files are brotli-compressed at build time (scripts/precompress-static)


def _stat_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def digest_of(path: Path) -> str | None:
    """The first :data:`DIGEST_LEN` hex digits of the file's sha256, memoised on its size and mtime."""
    key = _stat_key(path)
    if key is None:
        return None
    found = _digests.get(path)
    if found is not None and found[:2] == key:
        return found[2]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:DIGEST_LEN]
    with _lock:
        _digests[path] = (*key, digest)
    return digest


def hashed_name(rel: str, digest: str) -> str:
    stem, dot, ext = rel.rpartition(".")
    return f"{stem}.{digest}.{ext}" if dot and "/" not in ext else f"{rel}.{digest}"


def asset_url(rel: str, directory: Path = _STATIC) -> str:
    """``/static/<rel with its content digest>``; the plain ``/static/<rel>`` for a file that is not there."""
    digest = digest_of(directory / rel)
    return f"/static/{hashed_name(rel, digest)}" if digest else f"/static/{rel}"


def _encoded(path: Path, encoding: str, compute: bool = True) -> bytes | None:
    """The file's bytes in ``encoding`` (from memory when the file has not changed); ``None`` when it is gone,
    or not yet compressed and ``compute`` is false."""
    key = _stat_key(path)
    if key is None:
        return None
    found = _compressed.get((path, encoding))
    if found is not None and found[:2] == key:
        return found[2]
    body = _built(path) if encoding == "br" else None
    if body is None and not compute:
        return None
    body = body if body is not None else _CODECS[encoding](path.read_bytes())
    with _lock:
        _compressed[(path, encoding)] = (*key, body)
    return body


def _built(path: Path) -> bytes | None:
    """The build-time brotli body beside ``path`` (``<file>.br``), when it decompresses to the file's bytes."""
    sibling = path.with_name(path.name + ".br")
    try:
        body = sibling.read_bytes()
        return body if brotli.decompress(body) == path.read_bytes() else None
    except (OSError, brotli.error):
        return None


def _accepted(scope: Scope) -> set[str]:
    """The encodings of ``Accept-Encoding`` with a non-zero weight (``*`` stands for any)."""
    out = set()
    for part in Headers(scope=scope).get("accept-encoding", "").split(","):
        name, _, params = part.strip().partition(";")
        q = params.strip().removeprefix("q=") if params.strip().startswith("q=") else "1"
        try:
            weight = float(q)
        except ValueError:
            weight = 1.0
        if name.strip() and weight > 0:
            out.add(name.strip().lower())
    return set(_CODECS) if "*" in out else out & set(_CODECS)



class AssetFiles(StaticFiles):
    """:class:`StaticFiles` that also serves content-hashed names (module docstring) and gzips text."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        immutable = False
        match = _HASHED.match(path)
        if match and self.directory is not None:
            real = match["stem"] + match["ext"]
            if digest_of(Path(self.directory) / real) is not None:
                immutable = digest_of(Path(self.directory) / real) == match["digest"]
                path = real
        response = await super().get_response(path, scope)
        if response.status_code in (200, 304):
            response.headers["Cache-Control"] = IMMUTABLE if immutable else REVALIDATE
            response.headers["Vary"] = "Accept-Encoding"
        if response.status_code == 200 and isinstance(response, FileResponse):
            return self._compressed(response, scope) or response
        return response

    def _compressed(self, response: FileResponse, scope: Scope) -> Response | None:
        media = response.media_type or ""
        file = Path(str(response.path))
        size = int(response.headers.get("content-length", "0") or 0)
        accepted = _accepted(scope)
        if not media.startswith(_COMPRESSIBLE) or size < _MIN_SIZE or not accepted:
            return None
        if scope.get("method") == "HEAD" or "range" in Headers(scope=scope):
            return None
        encoding, body = "", None
        if "br" in accepted:
            encoding, body = "br", _encoded(file, "br", compute=size <= _BROTLI_ON_DEMAND)
        if body is None and "gzip" in accepted:
            encoding, body = "gzip", _encoded(file, "gzip")
        if body is None:
            return None
        headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "etag")}
        etag = response.headers.get("etag")
        if etag:
            headers["etag"] = etag[:-1] + f'-{encoding}"' if etag.endswith('"') else f"{etag}-{encoding}"
        headers["content-encoding"] = encoding
        return Response(body, status_code=200, headers=headers, media_type=media)

    def precompress(self, names: Iterable[str]) -> None:
        """Compress these files now (in a daemon thread), so the first request gets them from memory."""
        if self.directory is None:
            return
        root = Path(self.directory)

        def work() -> None:
            for encoding in ("gzip", "br"):  # gzip first: the fallback while brotli is still working
                for name in names:
                    _encoded(root / name, encoding)

        threading.Thread(target=work, name="precompress-static", daemon=True).start()

    def is_not_modified(self, response_headers: Any, request_headers: Any) -> bool:
        """Also match the ``-br`` / ``-gzip`` ETag of a compressed body (a browser sends back the one it got)."""
        tag = request_headers.get("if-none-match")
        etag = response_headers.get("etag")
        if tag and etag and etag.endswith('"'):
            sent = [t.strip(" W/") for t in tag.split(",")]
            if any(etag[:-1] + f'-{encoding}"' in sent for encoding in _CODECS):
                return True
        return bool(super().is_not_modified(response_headers, request_headers))
