"""Quote exports: a JSON document, a CSV sheet and a printable HTML page."""
