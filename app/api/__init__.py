"""The JSON API: ``/api/v1`` routers, one per resource, plus health, metrics and the offline docs."""
