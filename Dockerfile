# capplan: the web app and REST API (the same app `capplan serve` runs).
#   docker build -t capplan .
#   docker run -p 8000:8000 -v capplan-data:/data capplan
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CAPPLAN_HOST=0.0.0.0 \
    CAPPLAN_PORT=8000 \
    CAPPLAN_DATABASE_URL=sqlite:////data/capplan.db \
    CAPPLAN_STATIC_DIR=/app/static

# Pango for WeasyPrint (the quote PDF); gcc for the compiled estimator (docs/native.md), removed after the build.
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libpango-1.0-0 libpangoft2-1.0-0 \
        gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# Dependencies first, so source edits do not reinstall them.
COPY pyproject.toml README.md ./
COPY estimator/__init__.py estimator/__init__.py
COPY hardware_catalog/__init__.py hardware_catalog/__init__.py
COPY app/__init__.py app/__init__.py
RUN pip install '.[native]'
COPY . .
# compile the estimator into estimator/_native (package data: the installed package carries it and uses it while
# its sources match the build's manifest; `capplan serve` logs which), then install
RUN python scripts/build_native.py \
    && pip install --no-deps --force-reinstall . \
    && apt-get purge -y -qq gcc libc6-dev && apt-get autoremove -y -qq \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin capplan \
    && mkdir -p /data && chown capplan:capplan /data

USER capplan
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
# capplan serve applies the slow-client timeouts and the connection cap (README "Limits": CAPPLAN_HEADER_TIMEOUT_S,
# CAPPLAN_KEEP_ALIVE_TIMEOUT_S, CAPPLAN_MAX_BODY_BYTES, CAPPLAN_MAX_QUEUED_REQUESTS, ...): set them with -e.
CMD ["capplan", "serve"]
