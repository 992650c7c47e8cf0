"""capplan estimator: per-GPU training memory, step time and cost for LLM training layouts.

Pure domain library: typed, frozen inputs in, typed results out, bytes as integers. No web, database or
plotting imports.
"""
