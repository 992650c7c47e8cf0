"""The app's infrastructure: settings, database engine and migrations, start-up, metrics, request ids, the NUL
guard, strict JSON, rate limits, security headers, the effective catalog's cache, page translations and the
server's options. Nothing here knows an estimate, a quote or a page."""
