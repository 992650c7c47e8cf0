"""Pure chart builders: estimator results in, plotly figures out (no I/O, no web imports)."""
