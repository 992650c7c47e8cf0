"""Prometheus metrics: request count and latency by route template, plus domain counters.

Each app has its own registry (tests build many apps); ``GET /metrics`` exposes it. For several worker
processes set ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from estimator import native

__all__ = ["KNOWN_METHODS", "Metrics", "MetricsMiddleware"]


#: the method label's values (any other method name counts as ``other``), so a client cannot grow the label set;
#: the route label is already bounded: a matched route's template, ``/static/{path}`` or ``unmatched``
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "capplan_http_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "capplan_http_request_duration_seconds", "HTTP request latency", ["method", "route"],
            registry=self.registry,
        )
        self.estimates = Counter(
            "capplan_estimates", "Estimates computed", ["endpoint"], registry=self.registry
        )
        self.saved = Counter("capplan_saved_items", "Quotes and plans saved", ["kind"], registry=self.registry)
        self.compiled = Gauge("capplan_estimator_compiled", "1 when the estimator runs its compiled build "
                              "(estimator.native, docs/native.md), 0 when it runs as plain Python",
                              registry=self.registry)
        self.compiled.set(1 if native.status().active else 0)


def _route_template(scope: Scope) -> str:
    """The path with each path parameter put back as ``{name}`` (``/api/v1/quotes/{quote_id}``), so the label
    set stays small; ``unmatched`` when no route took the request."""
    if "endpoint" not in scope:
        return "unmatched"
    if str(scope["path"]).startswith("/static/"):
        return "/static/{path}"
    path, tail = str(scope["path"]), ""
    for name, value in reversed(list(scope.get("path_params", {}).items())):
        at = path.rfind(str(value))
        if at < 0:
            return "unmatched"
        path, tail = path[:at], "{" + name + "}" + path[at + len(str(value)) :] + tail
    return path + tail


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}
        start = time.perf_counter()

        async def record_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = _route_template(scope)
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
            self.metrics.requests.labels(method, route, str(status["code"])).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - start)
