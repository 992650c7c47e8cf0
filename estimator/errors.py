"""Errors raised by the estimator.

Every error is also a :class:`ValueError`, so plain callers can catch that; the web app maps the
whole tree to HTTP in one place (``app/errors.py``)::

    EstimatorError (ValueError)
    ├── InvalidRequestError        a field is out of range or combinations are invalid (names the field)
    │   └── UnsupportedCombinationError   valid alone, unsupported together (e.g. QLoRA + ZeRO-3 offload)
    ├── UnknownModelError          a preset id that does not exist
    ├── UnknownHardwareError       a GPU or server id not in the catalog
    └── ModelConfigError           a Hugging Face config.json the estimator cannot read
"""

from __future__ import annotations

__all__ = [
    "EstimatorError",
    "InvalidRequestError",
    "ModelConfigError",
    "UnknownHardwareError",
    "UnknownModelError",
    "UnsupportedCombinationError",
]


class EstimatorError(ValueError):
    """Base class of every estimator error. ``field`` is a dotted path into the request, or ``None``."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidRequestError(EstimatorError):
    """A request field is invalid, alone or in combination with another."""


class UnsupportedCombinationError(InvalidRequestError):
    """Each field is valid, but the frameworks do not support them together."""


class UnknownModelError(EstimatorError):
    """A model preset id that is not in the preset table."""


class UnknownHardwareError(EstimatorError):
    """A GPU or server id that is not in the hardware catalog."""


class ModelConfigError(EstimatorError):
    """A Hugging Face ``config.json`` that lacks what the estimator needs."""
