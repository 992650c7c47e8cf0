"""Page routes."""

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def home() -> str:
    return "<!doctype html><title>capplan</title><h1>capplan</h1>"
