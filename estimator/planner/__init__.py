"""The planner: search every layout of a job over the allowed hardware, rank them, export the winners.

``contract`` (requests and responses), ``space`` (the layouts of one world), ``hardware`` (hardware options,
worlds, prices), ``search`` (pruning with bounds, memory and dominance), ``plan`` (scoring, ranking,
:func:`~estimator.planner.plan.plan`), ``explain`` (why the winner wins), ``reverse`` (fewest GPUs, largest
model, longest sequence) and ``exports`` (launcher configs for a plan). ``estimator`` re-exports the entry
points; this face imports nothing, so loading one module does not load the others.
"""
