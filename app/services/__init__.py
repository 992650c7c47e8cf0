"""Use cases shared by the JSON API, the HTML pages and the CLI."""
