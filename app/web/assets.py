"""Static files with content-hashed names, long-lived caching and gzip.

Pages link ``asset("css/app.css")`` -> ``/static/css/app.<12 hex of its sha256>.css``. :class:`AssetFiles` (the
``/static`` mount) serves such a name from the file it stands for, with ``Cache-Control: public,
max-age=31536000, immutable``: a changed file gets a new name, so a browser never has to revalidate. Plain names
(what the API docs pages and old links use) and names whose digest is not the file's current one (an old page
after a deploy) are served too, with ``Cache-Control: no-cache`` (revalidated through the ETag).

Text files (JavaScript, CSS, SVG, JSON, HTML) go out gzip-compressed when the client accepts it: each file is
compressed once per process (level 9, ``mtime=0`` so the bytes are reproducible) and kept in memory, keyed by
path, size and modification time; :meth:`AssetFiles.precompress` does the known heavy ones at start-up so the
first visitor does not wait for it. A 1.2 MB plotly bundle goes out as about 0.4 MB.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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
_gzipped: dict[Path, tuple[int, int, bytes]] = {}


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


def _gzip(path: Path) -> bytes | None:
    key = _stat_key(path)
    if key is None:
        return None
    found = _gzipped.get(path)
    if found is not None and found[:2] == key:
        return found[2]
    body = gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)
    with _lock:
        _gzipped[path] = (*key, body)
    return body


def _accepts_gzip(scope: Scope) -> bool:
    value = Headers(scope=scope).get("accept-encoding", "")
    for part in value.split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() in ("gzip", "*"):
            q = params.strip().removeprefix("q=") if params.strip().startswith("q=") else "1"
            try:
                return float(q) > 0
            except ValueError:
                return True
    return False


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
        if not media.startswith(_COMPRESSIBLE) or size < _MIN_SIZE or not _accepts_gzip(scope):
            return None
        if scope.get("method") == "HEAD" or "range" in Headers(scope=scope):
            return None
        body = _gzip(file)
        if body is None:
            return None
        headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "etag")}
        etag = response.headers.get("etag")
        if etag:
            headers["etag"] = etag[:-1] + '-gzip"' if etag.endswith('"') else etag + "-gzip"
        headers["content-encoding"] = "gzip"
        return Response(body, status_code=200, headers=headers, media_type=media)

    def precompress(self, names: Iterable[str]) -> None:
        """Compress these files now (in a daemon thread), so the first request gets them from memory."""
        if self.directory is None:
            return
        root = Path(self.directory)

        def work() -> None:
            for name in names:
                _gzip(root / name)

        threading.Thread(target=work, name="precompress-static", daemon=True).start()

    def is_not_modified(self, response_headers: Any, request_headers: Any) -> bool:
        """Also match the ``-gzip`` ETag of the compressed body (a browser sends back the one it got)."""
        tag = request_headers.get("if-none-match")
        etag = response_headers.get("etag")
        if tag and etag and etag.endswith('"'):
            gz = etag[:-1] + '-gzip"'
            if gz in [t.strip(" W/") for t in tag.split(",")]:
                return True
        return bool(super().is_not_modified(response_headers, request_headers))
