"""The estimator's version, recorded with every saved quote so it can be recomputed and audited."""

ESTIMATOR_VERSION = "0.1.0"
