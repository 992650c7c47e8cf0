"""``capplan check`` and ``capplan measurements load``: the command lines (registered on ``app.cli.cli``).

``capplan check REQUEST --trace`` (any CPU) or ``--run`` (a GPU): prints the check beside the estimate, part by
part; ``--json FILE`` writes the record, ``--post URL --api-key KEY`` stores it (``POST /api/v1/measurements``).
Without the ``check`` extra (torch, transformers, peft) it says what to install and exits 2."""

from __future__ import annotations

import importlib.util
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["CHECK_EXTRA", "missing_packages", "post_record", "register"]

#: what ``pip install 'capplan[check]'`` brings (pyproject.toml's ``check`` extra)
CHECK_EXTRA = ("torch", "transformers", "peft")


def missing_packages() -> list[str]:
    return [name for name in CHECK_EXTRA if importlib.util.find_spec(name) is None]


def post_record(url: str, api_key: str, record: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """POST one record to ``url`` (a server's base URL, or its ``/api/v1/measurements``); the stored record."""
    target = url.rstrip("/")
    if not target.endswith("/api/v1/measurements"):
        target += "/api/v1/measurements"
    req = urllib.request.Request(target, data=json.dumps(record).encode(), method="POST", headers={
        "Content-Type": "application/json", "X-API-Key": api_key, "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        stored: dict[str, Any] = json.loads(resp.read())
    return stored


def _post_or_fail(fail: Any, url: str, api_key: str, record: dict[str, Any]) -> dict[str, Any]:
    if not url.startswith(("http://", "https://")):
        fail(f"--post: {url!r} is not an http(s) URL")
    try:
        return post_record(url, api_key, record)
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")[:2000]
        fail(f"--post: the server answered {exc.code}: {body}", 1)
    except (urllib.error.URLError, OSError) as exc:
        fail(f"--post: cannot reach {url}: {getattr(exc, 'reason', exc)}", 1)
    raise AssertionError("unreachable")


def register(cli: typer.Typer, fail: Any, read_json: Any, validation_message: Any, prepared_session: Any) -> None:
    """Add ``check`` and ``measurements`` to ``cli``, with the main command line's helpers passed in (this module
    never imports ``app.cli``, which imports it)."""
    measurements_cli = typer.Typer(no_args_is_help=True, help="Measured records beside their estimates.")
    cli.add_typer(measurements_cli, name="measurements")

    @cli.command()
    def check(
        request_file: Annotated[str, typer.Argument(help="JSON file with one estimate request; - for stdin")],
        trace: Annotated[bool, typer.Option("--trace", help="trace one iteration on fake tensors (any CPU)")] = False,
        run: Annotated[bool, typer.Option("--run", help="run a few steps on this machine's GPU")] = False,
        steps: Annotated[int, typer.Option(min=3, max=100, help="--run: steps (2 for memory, the rest timed)")] = 5,
        json_out: Annotated[str | None, typer.Option("--json", help="write the measurement record to this file "
                                                     "(- for stdout)")] = None,
        post: Annotated[str | None, typer.Option(help="POST the record to this capplan server")] = None,
        api_key: Annotated[str | None, typer.Option(help="the server's API key (with --post)")] = None,
    ) -> None:
        """Check an estimate on your own machine: traced (--trace) or measured (--run) per-GPU memory beside
        capplan's estimate, part by part. Needs pip install 'capplan[check]'."""
        from fastapi.exceptions import RequestValidationError

        from app.check.compare import format_rows, part_rows
        from app.core.startup import load_source_catalog
        from app.services.estimates import parse_one_or_many, run_estimate
        from estimator import EstimateRequest, EstimatorError

        if trace == run:
            fail("choose one of --trace (any CPU) or --run (a GPU)")
        if post is not None and not api_key:
            fail("--post needs --api-key")
        missing = missing_packages()
        if missing:
            fail(f"capplan check needs {', '.join(missing)}: pip install 'capplan[check]' "
                 "(torch, transformers and peft)")
        payload = read_json(request_file)
        if isinstance(payload, list):
            fail("(request): capplan check takes one request, not a list")
        try:
            request = parse_one_or_many(payload)
        except RequestValidationError as exc:
            fail(validation_message(list(exc.errors())))
        assert isinstance(request, EstimateRequest)
        try:
            result = run_estimate(request, load_source_catalog())
        except EstimatorError as exc:
            fail(f"{exc.field}: {exc.message}" if exc.field else exc.message)
        from app.check.command import check_request
        from app.check.trace import TraceUnsupported

        try:
            rec, header = check_request(request, result, trace=trace, steps=steps)
        except TraceUnsupported as exc:
            fail(str(exc))
        import os

        if int(os.environ.get("RANK", "0")) != 0:  # under torchrun: rank 0 reports for the layout
            return
        out = sys.stderr if json_out == "-" else sys.stdout
        print(f"{result.model.name} · {result.layout.world_size} GPU(s) · {header}", file=out)
        print(format_rows(part_rows(rec["measured"], rec["estimated"])), file=out)
        if json_out is not None:
            text = json.dumps(rec, indent=2)
            if json_out == "-":
                typer.echo(text)
            else:
                Path(json_out).write_text(text + "\n", encoding="utf-8")
        if post is not None:
            stored = _post_or_fail(fail, post, api_key or "", rec)
            print(f"stored as measurement {stored['id']}: {post.rstrip('/')}/measurements/{stored['id']}", file=out)

    @measurements_cli.command("load")
    def load(
        path: Annotated[Path, typer.Argument(help="a calibration file (tests/data/calibration_h200.json) or a JSON "
                                            "file of records (one, or a list)")],
        post: Annotated[str | None, typer.Option(help="POST them to this capplan server instead of the database")
                        ] = None,
        api_key: Annotated[str | None, typer.Option(help="the server's API key (with --post)")] = None,
    ) -> None:
        """Store measurement records: our calibration measurements (each case beside today's estimate) or records
        written by capplan check --json; into the configured database (a record stored already, the same in
        every field, is not stored twice), or POSTed to a server."""
        from pydantic import ValidationError

        from app.check.record import calibration_records
        from app.core.startup import load_source_catalog
        from app.schemas.measurement import MeasurementCreate
        from app.services.measurements import seed_measurements
        from estimator import EstimatorError, estimate

        if post is not None and not api_key:
            fail("--post needs --api-key")
        data = read_json(str(path))
        catalog = load_source_catalog()
        if isinstance(data, dict) and "cases" in data and "provenance" in data:
            records, skipped = calibration_records(path, catalog)
        else:
            records, skipped = (data if isinstance(data, list) else [data]), []
        bodies = []
        for i, rec in enumerate(records):
            try:
                bodies.append(MeasurementCreate.model_validate(rec))
            except ValidationError as exc:
                fail(f"record {i}: " + validation_message([{**e, "loc": ("body", *e["loc"])}
                                                           for e in exc.errors(include_url=False)]))
        already = 0
        if post is not None:
            ids = [_post_or_fail(fail, post, api_key or "", b.model_dump(mode="json"))["id"] for b in bodies]
        else:
            with prepared_session() as session:
                for i, body in enumerate(bodies):  # a bad request fails the load before anything is stored
                    try:
                        estimate(body.request, catalog)
                    except EstimatorError as exc:
                        fail(f"record {i}: request.{exc.field}: {exc.message}" if exc.field
                             else f"record {i}: {exc.message}")
                report = seed_measurements(session=session, catalog=catalog, bodies=bodies, actor="capplan-cli")
                session.commit()
                ids, already = report.ids, report.unchanged
        typer.echo(f"stored {len(ids)} measurement(s)" + (f" (ids {ids[0]}-{ids[-1]})" if ids else "")
                   + (f"; {already} already stored (the same record)" if already else "")
                   + (f"; left out {len(skipped)}: " + "; ".join(skipped) if skipped else ""))
