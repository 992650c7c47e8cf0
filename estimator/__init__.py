"""capplan estimator: per-GPU training memory, step time and cost for LLM training layouts.

Pure domain library: typed, frozen inputs in, typed results out, bytes as integers. No web, database or
plotting imports.
"""

from estimator.errors import (
    EstimatorError,
    InvalidRequestError,
    ModelConfigError,
    UnknownHardwareError,
    UnknownModelError,
    UnsupportedCombinationError,
)
from estimator.estimate import estimate
from estimator.presets import list_presets
from estimator.request import EstimateRequest, Hardware, Parallelism, Training
from estimator.response import EstimateResponse
from estimator.version import ESTIMATOR_VERSION

__all__ = [
    "ESTIMATOR_VERSION",
    "EstimateRequest",
    "EstimateResponse",
    "EstimatorError",
    "Hardware",
    "InvalidRequestError",
    "ModelConfigError",
    "Parallelism",
    "Training",
    "UnknownHardwareError",
    "UnknownModelError",
    "UnsupportedCombinationError",
    "estimate",
    "list_presets",
]
