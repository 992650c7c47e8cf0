"""The request's rules, read by the contract (``estimator.request``) and by the job (``estimator.job``) alike.

``derived`` (the values derived from a request's fields: the resolved TP plan, sharding, data-parallel degree; one
formula each) and ``stacks`` (each fine-tuning stack's documented defaults, with their sources, the combinations a
stack refuses, and the assumption texts). This face imports nothing, so loading it does not load the others.
"""
