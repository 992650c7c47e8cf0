"""Pydantic models of the REST API that are not the estimator's own contract."""
