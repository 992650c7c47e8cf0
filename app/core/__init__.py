"""The app's infrastructure: settings, database engine and migrations, start-up, metrics, request ids, the NUL
guard and rate limits. Nothing here knows an estimate, a quote or a page."""
