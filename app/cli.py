"""``capplan``: serve the app, estimate from a file, manage API keys, migrate the database, show the catalog.

Bad input exits with status 2 and one line on stderr (never a traceback).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.core.db import make_engine
from app.core.migrate import current_revision
from app.core.settings import get_settings
from app.core.startup import load_source_catalog, prepare_database
from app.errors import BODY, field_errors_from_locs
from app.repositories.api_keys import KeyExistsError, create_key, list_keys, revoke_key
from app.repositories.catalog import list_entries
from app.schemas.catalog import CatalogEntryOut
from app.services.estimates import parse_one_or_many, run_estimate, run_many
from estimator import EstimatorError

__all__ = ["cli", "main"]

cli = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                  help="Capacity planner for training and fine-tuning LLMs on multi-GPU servers.")
keys_cli = typer.Typer(no_args_is_help=True, help="API keys for the quoting tools (only hashes are stored).")
db_cli = typer.Typer(no_args_is_help=True, help="The database (SQLite by default, PostgreSQL via DATABASE_URL).")
catalog_cli = typer.Typer(no_args_is_help=True, help="The hardware catalog as the app sees it.")
cli.add_typer(keys_cli, name="api-keys")
cli.add_typer(db_cli, name="db")
cli.add_typer(catalog_cli, name="catalog")


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"capplan: error: {message}", err=True)
    raise typer.Exit(code)


def _prepared_session() -> Session:
    """A session on the configured database, migrated and seeded first (as ``capplan serve`` does)."""
    engine = make_engine(get_settings().database_url)
    prepare_database(engine, load_source_catalog())
    return Session(engine, expire_on_commit=False)


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="address to bind [CAPPLAN_HOST or 127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="port [CAPPLAN_PORT or 8000]")] = None,
    workers: Annotated[int, typer.Option(
        min=1, max=64, help="worker processes (one per CPU core); more than one needs a shared "
                            "CAPPLAN_RATE_LIMIT_STORAGE (e.g. redis://localhost:6379)")] = 1,
    access_log: Annotated[bool, typer.Option(help="log every request (uvicorn's access log)")] = True,
) -> None:
    """Run the web app and API (migrates and seeds the database on start)."""
    import os

    import uvicorn

    from app.core.serve import uvicorn_options
    from estimator import ESTIMATOR_VERSION, native

    settings = get_settings()
    # which estimator this server runs (the compiled build is a few times faster; docs/native.md), before uvicorn
    # starts; each worker logs it again when it starts (app.main), and GET /api/v1/version reports it
    typer.echo(f"capplan serve: estimator {ESTIMATOR_VERSION}, {native.describe()}", err=True)
    if workers > 1:
        if settings.rate_limit_storage.strip().startswith("memory://"):
            fail("--workers above 1 needs CAPPLAN_RATE_LIMIT_STORAGE set to a store every worker shares "
                 "(e.g. redis://localhost:6379): with memory:// each worker would count on its own, so a client "
                 "would get the limit once per worker")
        # migrate and seed once, here, rather than in every worker at the same time
        engine = make_engine(settings.database_url)
        try:
            prepare_database(engine, load_source_catalog(), migrate=settings.migrate_on_start,
                             seed=settings.seed_catalog_on_start)
        finally:
            engine.dispose()
        os.environ["CAPPLAN_MIGRATE_ON_START"] = "false"
        os.environ["CAPPLAN_SEED_CATALOG_ON_START"] = "false"
    # X-Forwarded-For/-Proto only from the proxies named in CAPPLAN_FORWARDED_ALLOW_IPS; none by default, so a
    # client cannot pick its own address (and with it its rate-limit counter) by sending the header
    trusted = settings.forwarded_allow_ips.strip()
    uvicorn.run("app.main:create_app", factory=True, host=host or settings.host, port=port or settings.port,
                proxy_headers=bool(trusted), forwarded_allow_ips=trusted or None, workers=workers,
                access_log=access_log, **uvicorn_options(settings))


def _read_json(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{'stdin' if path == '-' else path} is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}")
    except RecursionError:
        fail(f"{'stdin' if path == '-' else path} is not valid JSON: nested too deeply")
    except ValueError as exc:  # e.g. an integer of more than sys.get_int_max_str_digits() digits
        fail(f"{'stdin' if path == '-' else path} is not valid JSON: {exc}")


def _validation_message(errors: list[Any]) -> str:
    fields = field_errors_from_locs(errors)
    first = fields[0] if fields else None
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    field = "(request)" if first is None or first.field in ("", BODY) else first.field
    return f"{field}: {first.detail}{more}" if first else "invalid request"


def _imported(paths: list[str], fmt: str | None) -> Any:
    """The configs at ``paths`` read into a request (app.imports); a bad file exits 2 naming the file and key."""
    from app.imports import FORMATS, ImportProblem, SourceFile, import_files

    if fmt is not None and fmt not in FORMATS:
        fail(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    files = []
    for path in paths:
        try:
            size = Path(path).stat().st_size if path != "-" else 0
            if size > (1 << 20):
                fail(f"{path}: {size:,} bytes is over the 1,048,576-byte limit for a config file")
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
        files.append(SourceFile(name=path, content=text, format=fmt))
    try:
        return import_files(files)
    except ImportProblem as exc:
        fail(str(exc).replace("\n", " "))


@cli.command("import")
def import_configs(
    files: Annotated[list[str], typer.Argument(help="config files of one run (e.g. a trainer YAML and its DeepSpeed "
                                               "JSON); - for stdin")],
    fmt: Annotated[str | None, typer.Option("--format", "-f", help="axolotl, llama-factory, trainer, torchtune, "
                                            "deepspeed, accelerate, torchtitan, megatron or hf-config [detected]")]
    = None,
    report: Annotated[bool, typer.Option("--report", help="print the reading report (JSON) with the request on "
                                         "stdout instead of the plain report on stderr")] = False,
) -> None:
    """Read existing training configs into an estimate request (printed as JSON); the reading report (keys read,
    what capplan cannot represent, defaults filled, what is missing) goes to stderr."""
    result = _imported(files, fmt)
    if report:
        typer.echo(json.dumps(result.as_dict(), indent=2))
    else:
        typer.echo(json.dumps(result.request.model_dump(mode="json", exclude_unset=True), indent=2))
        typer.echo(result.report.text(), err=True)


@cli.command()
def estimate(
    input_file: Annotated[str | None, typer.Option(
        "--input", "-i", help="JSON file with one request or a list; - for stdin")] = None,
    from_files: Annotated[list[str] | None, typer.Option(
        "--from", help="estimate from existing training configs instead (repeat for several files: a trainer YAML "
        "and its DeepSpeed JSON); see capplan import")] = None,
    fmt: Annotated[str | None, typer.Option("--format", "-f", help="the format of the --from files [detected]")]
    = None,
) -> None:
    """Estimate one request (or a JSON list of them) and print the response(s) as JSON."""
    from fastapi.exceptions import RequestValidationError

    if (input_file is None) == (not from_files):
        fail("give --input FILE (a request) or --from FILE (a training config), not both or neither")
    if from_files:
        imported = _imported(from_files, fmt)
        if imported.report.needs:
            fail(imported.report.needs[0])
        typer.echo(imported.report.text(), err=True)
        payload: Any = imported.request.model_dump(mode="json", exclude_unset=True)
    else:
        assert input_file is not None
        payload = _read_json(input_file)
    try:
        parsed = parse_one_or_many(payload)
    except RequestValidationError as exc:
        fail(_validation_message(list(exc.errors())))
    catalog = load_source_catalog()
    try:
        result: Any = run_many(parsed, catalog) if isinstance(parsed, list) else run_estimate(parsed, catalog)
    except EstimatorError as exc:
        fail(f"{exc.field}: {exc.message}" if exc.field else exc.message)
    data = [r.model_dump(mode="json") for r in result] if isinstance(result, list) else result.model_dump(mode="json")
    typer.echo(json.dumps(data, indent=2))


@cli.command()
def infer(
    input_file: Annotated[str, typer.Option("--input", "-i", help="JSON file with one inference request or a list; "
                                            "- for stdin")],
) -> None:
    """Size serving: per-GPU memory as the engine allocates it, speed and cost (one request or a list)."""
    from fastapi.exceptions import RequestValidationError

    from app.services.inference import parse_inference, run_inference, run_inference_many

    payload = _read_json(input_file)
    try:
        parsed = parse_inference(payload)
    except RequestValidationError as exc:
        fail(_validation_message(list(exc.errors())))
    catalog = load_source_catalog()
    try:
        result: Any = (run_inference_many(parsed, catalog) if isinstance(parsed, list)
                       else run_inference(parsed, catalog))
    except EstimatorError as exc:
        fail(f"{exc.field}: {exc.message}" if exc.field else exc.message)
    data = [r.model_dump(mode="json") for r in result] if isinstance(result, list) else result.model_dump(mode="json")
    typer.echo(json.dumps(data, indent=2))


@cli.command()
def plan(
    input_file: Annotated[str, typer.Option("--input", "-i", help="JSON file with one plan request; - for stdin")],
    question: Annotated[str | None, typer.Option(
        "--question", "-q", help="answer a reverse question instead: fewest-gpus, largest-model or "
        "longest-sequence")] = None,
    vary: Annotated[str | None, typer.Option(
        "--vary", help="comma-separated fine-tuning stack mechanisms the planner may change as one more search axis "
        "(the request's vary_mechanisms): loss_kernel, fused_kernels, activation_offloading, optimizer")] = None,
) -> None:
    """Search the layouts that fit a job (estimator.planner.plan) and print the ranked plans as JSON; with --question,
    the answer to a reverse question (estimator.planner.reverse). ``--vary`` sets the request's ``vary_mechanisms``
    (a bad name exits 2 naming it)."""
    from pydantic import BaseModel, ValidationError

    from estimator.planner.plan import PlanRequest
    from estimator.planner.plan import plan as run_plan
    from estimator.planner.reverse import QUESTIONS, ReverseRequest, answer

    if question is not None and question not in QUESTIONS:
        fail(f"--question: {question!r} is not one of {', '.join(QUESTIONS)}")
    payload = _read_json(input_file)
    if question is not None and isinstance(payload, dict):
        payload = {**payload, "question": question}
    if vary is not None and isinstance(payload, dict):
        payload = {**payload, "vary_mechanisms": [v.strip() for v in vary.split(",") if v.strip()]}
    model: type[BaseModel] = ReverseRequest if question is not None else PlanRequest
    try:
        request = model.model_validate_json(json.dumps(payload), strict=True)  # strict types, as the API
    except ValidationError as exc:
        fail(_validation_message([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]))
    assert isinstance(request, PlanRequest)  # ReverseRequest is one too
    try:
        catalog = load_source_catalog()
        result: BaseModel = answer(request, catalog) if isinstance(request, ReverseRequest) else run_plan(
            request, catalog)
    except EstimatorError as exc:
        fail(f"{exc.field}: {exc.message}" if exc.field else exc.message)
    typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))


@cli.command()
def cluster(
    input_file: Annotated[str, typer.Option("--input", "-i", help="JSON file with one cluster request; - for stdin")],
) -> None:
    """Design the compute fabric of N nodes (leaf / spine / core, parts, power, racks, cost, TCO; with a `job`, the
    scaling curve) and print it as JSON (the API's POST /api/v1/clusters)."""
    from estimator.cluster import ClusterRequest
    from estimator.cluster import design_cluster as run_design

    payload = _read_json(input_file)
    try:
        request = ClusterRequest.model_validate_json(json.dumps(payload), strict=True)
    except ValidationError as exc:
        fail(_validation_message([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]))
    try:
        result = run_design(request, load_source_catalog())
    except EstimatorError as exc:
        fail(f"{exc.field}: {exc.message}" if exc.field else exc.message)
    typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))


#: the largest nccl-tests output nccl-check reads (a full sweep of every collective is a few hundred KB)
NCCL_MAX_BYTES = 20 * 2**20


@cli.command("nccl-check")
def nccl_check(
    file: Annotated[str, typer.Argument(help="nccl-tests output (all_reduce_perf, all_gather_perf, "
                                        "reduce_scatter_perf, alltoall_perf; several runs in one file are fine); - "
                                        "for stdin")],
    server: Annotated[str, typer.Option(help="the node the test ran on (a catalog server id)")] = "nvidia-dgx-h100",
    nodes: Annotated[int | None, typer.Option(min=1, max=100_000, help="nodes in the test when the output has no "
                                              "'Using devices' lines")] = None,
    gpus: Annotated[int | None, typer.Option(min=1, max=1_000_000, help="GPUs in the test when the output has no "
                                             "'Using devices' lines")] = None,
    collective: Annotated[str | None, typer.Option(help="all_reduce, all_gather, reduce_scatter or alltoall, when "
                                                   "the output does not name it")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the check as JSON")] = False,
) -> None:
    """Compare nccl-tests bus bandwidth with the published figures for the server and path: healthy, or how far
    below with the likely causes. Exits 0 when every run is healthy (or cannot be judged), 1 when one is degraded
    or overstated, 2 on a file that cannot be read or has no result rows."""
    from estimator.cluster.nccl import check_nccl
    from hardware_catalog import UnknownCatalogIdError

    try:
        if file == "-":
            text = sys.stdin.read(NCCL_MAX_BYTES + 1)
        else:
            with Path(file).open(encoding="utf-8", errors="strict") as fh:
                text = fh.read(NCCL_MAX_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}")
    if len(text) > NCCL_MAX_BYTES:
        fail(f"{file}: more than {NCCL_MAX_BYTES // 2**20} MB; pass the nccl-tests output only")
    catalog = load_source_catalog()
    try:
        result = check_nccl(text, catalog.server(server), catalog, nodes=nodes, gpus=gpus, collective=collective)
    except UnknownCatalogIdError as exc:
        fail(f"--server: {exc}")
    except EstimatorError as exc:
        fail(f"{file}: {exc.message}" if exc.field == "file" else f"--{exc.field}: {exc.message}")
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        for t in result.tests:
            typer.echo(f"{t.collective}: {t.summary}")
            typer.echo(f"  path: {t.path}; GPUs: {t.n_gpus or '?'} ({t.gpu_name or 'not named'})")
            if t.expectation_source:
                typer.echo(f"  expected from: {t.expectation_source}")
            for cause in t.causes:
                typer.echo(f"  check: {cause}")
        for warning in result.warnings:
            typer.echo(f"warning: {warning}")
    if any(t.verdict in ("degraded", "overstated") for t in result.tests):
        raise typer.Exit(1)


@keys_cli.command("create")
def keys_create(
    name: Annotated[str, typer.Option(help="who uses the key, e.g. quoting-tool")],
    rate_limit: Annotated[str | None, typer.Option(help="e.g. 1000/minute [CAPPLAN_RATE_LIMIT_PER_KEY]")] = None,
) -> None:
    """Make a key and print it once; only its hash is stored."""
    from limits import parse

    if rate_limit is not None:
        try:
            parse(rate_limit)
        except ValueError:
            fail(f"--rate-limit {rate_limit!r} is not a limit like 600/minute")
    with _prepared_session() as session:
        try:
            _row, plaintext = create_key(session=session, name=name, rate_limit=rate_limit)
        except KeyExistsError as exc:
            fail(str(exc))
        session.commit()
    typer.echo(plaintext)
    typer.echo(f"API key {name!r} created; send it as X-API-Key. It is not shown again.", err=True)


@keys_cli.command("list")
def keys_list() -> None:
    """Names, prefixes, limits and state of every key (never the keys)."""
    with _prepared_session() as session:
        rows = list_keys(session=session)
    typer.echo(f"{'NAME':24} {'PREFIX':14} {'RATE LIMIT':14} {'CREATED':20} STATE")
    for r in rows:
        state = f"revoked {r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at else "active"
        typer.echo(f"{r.name:24} {r.prefix:14} {r.rate_limit or 'default':14} {r.created_at:%Y-%m-%d %H:%M}     "
                   f"{state}")


@keys_cli.command("revoke")
def keys_revoke(name_or_prefix: Annotated[str, typer.Argument(help="the key's name or prefix")]) -> None:
    """Revoke a key: requests with it get 401 from then on."""
    with _prepared_session() as session:
        row = revoke_key(session=session, name_or_prefix=name_or_prefix)
        if row is None:
            fail(f"no API key with the name or prefix {name_or_prefix!r}")
        session.commit()
    typer.echo(f"revoked {row.name} ({row.prefix})")


@db_cli.command("upgrade")
def db_upgrade(seed: Annotated[bool, typer.Option(help="also seed the hardware catalog and the shipped "
                                                   "measurements")] = True) -> None:
    """Apply the Alembic migrations (alembic upgrade head), then seed the catalog and the shipped measurements."""
    settings = get_settings()
    engine = make_engine(settings.database_url)
    report = prepare_database(engine, load_source_catalog() if seed else None, seed=seed)
    typer.echo(f"database at revision {current_revision(engine)}")
    if report is not None:
        typer.echo(f"catalog {report.version}: {report.added} added, {report.changed} changed, "
                   f"{report.unchanged} unchanged, {len(report.conflicts)} conflicts")
    if report is not None and report.measurements is not None:
        m = report.measurements
        typer.echo(f"shipped measurements: {m.added} added, {m.unchanged} already stored"
                   + (f", {len(m.left_out)} left out: " + "; ".join(m.left_out) if m.left_out else ""))


@catalog_cli.command("show")
def catalog_show(
    kind: Annotated[str | None, typer.Option(help="gpu, server or cloud_offer [all]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Every entry with its effective values; overridden entries are marked *."""
    if kind not in (None, "gpu", "server", "cloud_offer"):
        fail(f"--kind {kind!r}: use gpu, server or cloud_offer")
    with _prepared_session() as session:
        rows = [CatalogEntryOut.of(r) for r in list_entries(session=session, kind=kind)]  # type: ignore[arg-type]
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return
    for r in rows:
        mark = "*" if r.overrides else " "
        name = r.effective.get("name", "")
        typer.echo(f"{r.kind:12} {r.id:32}{mark} {r.origin:7} {name}")


from app.check.cli import register as _register_check  # noqa: E402 (needs fail, _read_json, _prepared_session above)

_register_check(cli, fail, _read_json, _validation_message, _prepared_session)


def main() -> None:
    """The console entry point: bad settings and database failures end in one line, not a traceback."""
    try:
        cli()
    except ValidationError as exc:  # settings from the environment
        typer.echo(f"capplan: error: {_validation_message(list(exc.errors()))}", err=True)
        sys.exit(2)
    except SQLAlchemyError as exc:
        typer.echo(f"capplan: error: database: {type(exc).__name__}: {str(exc).splitlines()[0]}", err=True)
        sys.exit(1)
