"""``python -m app`` is ``capplan``."""

from app.cli import main

main()
