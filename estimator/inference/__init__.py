"""Serving a model on the node after training: memory as the engine allocates it, speed, and cost.

Pure: no web, database or plotting imports. Entry point :func:`estimate_inference`.
"""

from estimator.inference.estimate import estimate_inference
from estimator.inference.request import InferenceRequest
from estimator.inference.response import InferenceResponse

__all__ = ["InferenceRequest", "InferenceResponse", "estimate_inference"]
