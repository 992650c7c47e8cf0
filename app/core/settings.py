"""Application settings, read from the environment (``CAPPLAN_`` prefix) or passed to ``create_app``.

``DATABASE_URL`` is also read without the prefix, as every hosting platform sets it that way.
"""

from __future__ import annotations

from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Literal

from limits import parse
from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CAPPLAN_", env_ignore_empty=True, extra="ignore")

    database_url: str = Field(
        default="sqlite:///./capplan.db",
        validation_alias=AliasChoices("CAPPLAN_DATABASE_URL", "DATABASE_URL", "database_url"),
        description="SQLAlchemy URL; postgres:// and postgresql:// are rewritten to postgresql+psycopg://",
    )
    migrate_on_start: bool = Field(default=True, description="run `alembic upgrade head` when the app starts")
    seed_catalog_on_start: bool = Field(
        default=True, description="seed the hardware catalog and the shipped measurement records on start")
    rate_limit_anonymous: str = Field(default="120/minute", description="requests without an API key, per IP")
    rate_limit_per_key: str = Field(default="600/minute", description="default limit of one API key")
    rate_limit_web_writes: str = Field(
        default="30/minute", description="form posts of the pages (save, re-compute), per client address"
    )
    rate_limit_web_pages: str = Field(
        default="60/minute", description="costly pages (/plan, /compare), per client address"
    )
    rate_limit_storage: str = Field(
        default="memory://",
        description="limits storage URI: memory:// (per process), or one every worker shares, e.g. redis://host",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    static_dir: Path = Field(default=Path(__file__).resolve().parents[2] / "static")
    allowed_hosts: str = Field(
        default="localhost,127.0.0.1,[::1]",
        description="Host header names the app answers (comma separated, *.example.com wildcards, * = any)",
    )
    forwarded_allow_ips: str = Field(
        default="",
        description="proxies whose X-Forwarded-For/-Proto `capplan serve` trusts (comma separated; empty = none)",
    )

    # --- availability: the work one request may do, and what the server accepts (docs: README "Limits")
    max_layouts_per_request: int = Field(default=100_000, ge=1, description="planner layouts one request may search")
    compute_timeout_s: float = Field(default=5.0, gt=0, description="wall-clock cap of one request's computation")
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024, description="largest request body (413 beyond)")
    body_timeout_s: float = Field(default=15.0, gt=0, description="longest wait for the next chunk of a body (408)")
    header_timeout_s: float = Field(default=10.0, gt=0, description="`capplan serve`: time to send the headers")
    gc_freeze: bool = Field(default=True, description="move the objects alive at start-up out of the garbage "
                            "collector's reach while serving (gc.freeze; no full-collection stalls)")
    keep_alive_timeout_s: int = Field(default=5, ge=1, description="`capplan serve`: idle keep-alive connections")
    max_concurrent_requests: int = Field(default=16, ge=1, description="requests computed at once (the rest queue)")
    max_queued_requests: int = Field(default=1024, ge=0, description="requests waiting their turn; 503 beyond")
    queue_timeout_s: float = Field(default=10.0, gt=0, description="longest wait in the queue; 503 beyond")
    catalog_refresh_s: float = Field(default=5.0, ge=0, description="how often other processes' catalog changes "
                                     "are looked for (this process's own apply at once)")

    currency: Literal["USD", "BRL"] = Field(default="USD", description="the pages' default currency (BRL needs "
                                            "the rate below)")
    brl_per_usd: float | None = Field(default=None, gt=0, description="reais per US dollar, for the pages' BRL")
    brl_rate_date: date | None = Field(default=None, description="the date of brl_per_usd")
    brl_rate_source: str | None = Field(default=None, description="where brl_per_usd comes from (e.g. the Banco "
                                       "Central do Brasil PTAX of that date)")

    @model_validator(mode="after")
    def _brl_is_dated_and_sourced(self) -> Settings:
        if self.brl_per_usd is not None and (self.brl_rate_date is None or not self.brl_rate_source):
            raise ValueError("CAPPLAN_BRL_PER_USD needs CAPPLAN_BRL_RATE_DATE and CAPPLAN_BRL_RATE_SOURCE")
        if self.currency == "BRL" and self.brl_per_usd is None:
            raise ValueError("CAPPLAN_CURRENCY=BRL needs CAPPLAN_BRL_PER_USD (with its date and source)")
        return self

    @field_validator("database_url", mode="before")
    @classmethod
    def _psycopg_driver(cls, value: object) -> object:
        if isinstance(value, str):
            for prefix in ("postgres://", "postgresql://"):
                if value.startswith(prefix):
                    return "postgresql+psycopg://" + value[len(prefix) :]
        return value


    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_parse(cls, value: str) -> str:
        """Starlette's rules: a name, ``*``, or a ``*.`` wildcard in front only; at least one."""
        hosts = [h.strip() for h in value.split(",") if h.strip()]
        if not hosts:
            raise ValueError("give at least one host name (or * for any)")
        bad = [h for h in hosts if "*" in h[1:] or (h.startswith("*") and h != "*" and not h.startswith("*."))]
        if bad:
            raise ValueError(f"a wildcard may only lead, as in *.example.com: {', '.join(bad)}")
        return value

    @field_validator("rate_limit_anonymous", "rate_limit_per_key", "rate_limit_web_writes", "rate_limit_web_pages")
    @classmethod
    def _limit_parses(cls, value: str) -> str:
        parse(value)  # raises ValueError naming the bad limit
        return value


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings from the environment; a FastAPI dependency that tests override."""
    return Settings()
