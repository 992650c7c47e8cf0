"""Database access, one module per table group; keyword-only functions taking a ``Session``."""
