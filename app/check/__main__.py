"""``python -m app.check REQUEST --run --json FILE``: ``capplan check`` without the web dependencies
(:func:`app.check.command.main`)."""

from app.check.command import main

main()
