"""One router per resource under ``/api/v1``."""
