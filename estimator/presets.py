"""Model presets (ids such as ``llama-3.1-70b``), read from ``estimator/data/model_presets.yaml``."""

from estimator.modelspec import list_presets, preset

__all__ = ["list_presets", "preset"]
