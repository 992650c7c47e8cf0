"""``GET /plan``: the planner page. A form (model, method, sequence length, global batch, tokens, objective and
constraints) whose plain GET submit renders the whole result, and whose htmx submit swaps the result in place.

Query parameters are named by their path in :class:`estimator.planner.contract.PlanRequest`
(``training.seq_len``, ``constraints.max_nodes``, ``constraints.gpus`` once per checked GPU ...), so a
validation error's location names the form field it belongs to. ``sort`` (a column key) and ``dir``
(``asc``/``desc``) order the table on the server, for pages without JavaScript; ``static/js/planner.js`` sorts
the same table in the browser. ``progress`` names a search whose progress ``GET /plan/progress?id=`` reports
(fed by ``plan()``'s progress callback). ``question`` (``fewest-gpus``, ``largest-model``,
``longest-sequence``; sent by the form's "Reverse questions" buttons) answers that question about the same job
instead of ranking plans (:func:`estimator.planner.reverse.answer`).
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError

from app.charts.planner import axes_for, time_cost_figure
from app.charts.style import figure_json
from app.core.i18n import N_, localize_number
from app.core.i18n import gettext as _
from app.deps import CatalogDep
from app.services.budget import request_budget
from app.services.plan_rules import usable_plan
from app.web import backend
from app.web.estimate_page import verdict_of
from app.web.forms import FormErrors, _build_model, _model_input, plain_message, request_to_query
from app.web.layout_suggestion import plan_vs_estimate
from app.web.templating import is_htmx, render
from estimator import EstimatorError
from estimator.messages import Text
from estimator.planner.contract import Objective, Plan, PlanRequest, PlanResponse, Pricing
from estimator.planner.reverse import QUESTIONS, ReverseRequest, ReverseResponse, answer
from estimator.request import Training
from estimator.tco.run_cost import CostChoice

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["COLUMNS", "PROGRESS", "PlanForm", "ProgressBoard", "parse_plan_form", "router", "sort_rows"]

router = APIRouter()

DEFAULT_MODEL = str(PlanRequest.model_fields["model"].default)
METHODS: tuple[str, ...] = tuple(get_args(Training.model_fields["method"].annotation))
OBJECTIVES: tuple[str, ...] = get_args(Objective)
PRICINGS: tuple[str, ...] = get_args(Pricing)

#: Form field -> (label, help). Names are paths into PlanRequest.
FIELDS: dict[str, tuple[str, str]] = {
    "model": (N_("Model"), N_("Published model shapes; or paste a config.json below")),
    "model_json": (N_("config.json"), ""),
    "training.method": (N_("Training method"), ""),
    "training.seq_len": (N_("Sequence length"), N_("Tokens per sequence")),
    "global_batch_size": (N_("Global batch"), N_("Sequences per optimizer step; empty for about 1M tokens")),
    "training.train_tokens": (N_("Tokens to train on"), N_("e.g. 1e9; empty for per-step figures only")),
    "objective": (N_("Optimise for"), ""),
    "pricing": (N_("Pricing"), N_("Cloud on-demand, cloud reserved, or owned servers")),
    "constraints.gpus": (N_("GPUs"), N_("None ticked: every GPU with a price")),
    "constraints.servers": (N_("Servers"), N_("Ticked servers are searched besides the GPUs")),
    "constraints.max_nodes": (N_("Max nodes"), N_("1 to this many servers are searched")),
    "constraints.budget_usd": (N_("Budget (USD)"), N_("Cost of the whole run; needs tokens to train on")),
    "constraints.deadline_days": (N_("Deadline (days)"), N_("Time to train; needs tokens to train on")),
    "question": (N_("Question"), N_("Empty for ranked plans")),
    "cost.utilisation": (N_("Utilisation (owned)"), N_("Share of hours doing useful work, 0.01 to 1; empty: the "
                                                       "TCO default")),
    "cost.electricity_usd_per_kwh": (N_("Electricity ($/kWh, owned)"), N_("Empty: the TCO default")),
    "cost.pue": (N_("PUE (owned)"), N_("Power usage effectiveness, 1 to 3; empty: the TCO default")),
    "cost.provider_class": (N_("Provider class (rented)"), N_("Whose cloud offers: hyperscalers or GPU clouds")),
    "vary_mechanisms": (N_("Let the planner change"), N_("Fine-tuning stack mechanisms tried besides the layouts; "
                                                           "each plan that uses one says so, with the memory it saves "
                                                           "and the time it costs")),
}
#: the mechanisms the planner may vary (``PlanRequest.vary_mechanisms``): value -> (label, detail)
MECHANISM_OPTIONS: dict[str, tuple[str, str]] = {
    "loss_kernel": (N_("Fused loss"), N_("Liger fused linear cross-entropy or Cut Cross-Entropy: no full logits")),
    "fused_kernels": (N_("Liger kernels"), N_("RMSNorm, SwiGLU, RoPE; only on model families Liger patches")),
    "activation_offloading": (N_("Activation offloading"), N_("To pinned host memory: more host RAM and PCIe "
                                                               "traffic")),
    "optimizer": (N_("8-bit AdamW"), N_("In place of AdamW (bitsandbytes): other numerics")),
}
#: the cost settings of the form (``cost`` of the plan request, refining ``pricing``), sent only when filled in
COST_FIELDS = ("cost.utilisation", "cost.electricity_usd_per_kwh", "cost.pue", "cost.provider_class")
PROVIDER_CLASSES: tuple[str, ...] = tuple(get_args(CostChoice.model_fields["provider_class"].annotation))
QUESTION_LABELS: dict[str, tuple[str, str]] = {
    "fewest-gpus": (N_("Fewest GPUs"), N_("the smallest GPU and node count that runs this job")),
    "largest-model": (N_("Largest model"), N_("which models fit one node (or the pinned node count)")),
    "longest-sequence": (N_("Longest sequence"), N_("the longest sequence that fits one node")),
}
LIST_FIELDS = ("constraints.gpus", "constraints.servers", "vary_mechanisms")
#: Shown when the parameter is absent (a first visit); an empty field that was sent means "none".
FORM_DEFAULTS: dict[str, str] = {
    "model": DEFAULT_MODEL,
    "model_json": "",
    "training.method": "lora",
    "training.seq_len": str(Training.model_fields["seq_len"].default),
    "global_batch_size": "",
    "training.train_tokens": "1e9",
    "objective": "time",
    "pricing": "on-demand",
    "constraints.max_nodes": "4",
    "constraints.budget_usd": "",
    "constraints.deadline_days": "",
    "question": "",
    **dict.fromkeys(COST_FIELDS, ""),
}

_ROOT_ERRORS = (  # model-level validator messages -> (field, plain words)
    ("budget_usd and deadline_days", "training.train_tokens", "A budget or a deadline needs the tokens to train on"),
    ("global_batch_tokens is less", "global_batch_size", N_("The global batch is less than one sequence")),
)


def dom_id(name: str) -> str:
    return "f-" + name.replace(".", "-").replace("_", "-")


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    numeric: bool = True
    first_dir: str = "asc"  # the direction of the first click: larger is better for throughput, MFU, headroom


COLUMNS: tuple[Column, ...] = (
    Column("rank", "#"),
    Column("layout", N_("Layout"), numeric=False),
    Column("gpu", "GPU", numeric=False),
    Column("nodes", N_("Nodes")),
    Column("sharding", N_("Sharding"), numeric=False),
    Column("tp", "TP"),
    Column("pp", "PP"),
    Column("mbs", N_("Micro-batch")),
    Column("ckpt", N_("Checkpointing")),
    Column("headroom", N_("Fits / headroom"), first_dir="desc"),
    Column("step", N_("Step time")),
    Column("tps", N_("Tokens/s"), first_dir="desc"),
    Column("mfu", "MFU", first_dir="desc"),
    Column("ttt", N_("Time to train")),
    Column("cost", N_("Cost")),
)
COLUMN_KEYS = {c.key: c for c in COLUMNS}
_CKPT_ORDER = {"none": 0, "selective": 1, "full": 2}
_SHARDING = {"none": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "hsdp": "HSDP"}
_FRAMEWORK = {"deepspeed": "DeepSpeed", "pytorch": "FSDP2", "megatron": "Megatron"}


# --- progress -------------------------------------------------------------------------------------------------

class ProgressBoard:
    """``(evaluated, total)`` of running searches by id, for ``GET /plan/progress``, and how much of the work the
    screen did (layouts screened at once, exact estimates); old entries expire."""

    def __init__(self, ttl_s: float = 600.0, capacity: int = 1000) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, tuple[int, int, float]] = {}
        self._details: dict[str, tuple[int, int]] = {}
        self._ttl_s = ttl_s
        self._capacity = capacity

    def callback(self, key: str) -> _Report:
        return _Report(self, key)

    def update(self, key: str, done: int, total: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._items[key] = (done, total, now)
            if len(self._items) > self._capacity:
                for old in [k for k, v in self._items.items() if now - v[2] > self._ttl_s] or list(self._items)[:1]:
                    del self._items[old]
                    self._details.pop(old, None)

    def update_detail(self, key: str, screened: int, exact: int) -> None:
        with self._lock:
            self._details[key] = (screened, exact)

    def get(self, key: str) -> tuple[int, int] | None:
        with self._lock:
            item = self._items.get(key)
        return None if item is None else (item[0], item[1])

    def detail(self, key: str) -> tuple[int, int] | None:
        """``(layouts screened, exact estimates)`` so far, once the search has reported them."""
        with self._lock:
            return self._details.get(key)


@dataclass(frozen=True)
class _Report:
    """``plan()``'s progress callback for one search: ``(done, total)`` per group of GPUs, and ``detail``
    (``estimator.planner.plan.search`` calls it before each report when the callback has it)."""

    board: ProgressBoard
    key: str

    def __call__(self, done: int, total: int) -> None:
        self.board.update(self.key, done, total)

    def detail(self, screened: int, exact: int) -> None:
        self.board.update_detail(self.key, screened, exact)


PROGRESS = ProgressBoard()
_PROGRESS_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


def progress_text(state: tuple[int, int] | None, detail: tuple[int, int] | None = None) -> str:
    if state is None or state[1] <= 0:
        return _("Searching layouts…")
    done, total = state
    text = _("Searching %(total)s layouts… %(pct)s%%") % {"total": _count(total), "pct": 100 * done // total}
    if detail is not None:
        text += " · " + _("%(screened)s screened at once, %(exact)s estimated exactly") % {
            "screened": _count(detail[0]), "exact": _count(detail[1])}
    return text


def _count(n: int) -> str:
    return localize_number(f"{n:,}")


# --- the form -------------------------------------------------------------------------------------------------

@dataclass
class PlanForm:
    """What the form shows again, the request when it validated, and the messages per field."""

    values: dict[str, Any]
    request: PlanRequest | None
    errors: FormErrors = field(default_factory=FormErrors)
    sort: str = "rank"
    direction: str = "asc"
    from_estimate: str = ""  # the estimate query this search came from (its layout is shown beside the winner)

    def query(self, **override: str) -> str:
        """The query string of this form (every field, so a shared link is the same search)."""
        pairs: list[tuple[str, str]] = []
        for name in FIELDS:
            if name in LIST_FIELDS:
                pairs += [(name, v) for v in self.values[name]]
            elif name not in ("model_json", "question", *COST_FIELDS) or self.values[name]:
                pairs.append((name, self.values[name]))
        if self.from_estimate:
            pairs.append(("from_estimate", self.from_estimate))
        sort, direction = override.get("sort", self.sort), override.get("dir", self.direction)
        if sort != "rank" or direction != "asc":
            pairs += [("sort", sort), ("dir", direction)]
        return urlencode(pairs)


def _text(params: Mapping[str, Any], name: str) -> str | None:
    getlist = getattr(params, "getlist", None)
    items = getlist(name) if getlist is not None else ([params[name]] if name in params else [])
    return str(items[-1]).strip() if items else None


def _list(params: Mapping[str, Any], name: str) -> list[str]:
    getlist = getattr(params, "getlist", None)
    items = getlist(name) if getlist is not None else params.get(name, [])
    if isinstance(items, str):
        items = [items]
    return list(dict.fromkeys(str(v).strip() for v in items if str(v).strip()))


def _error_name(loc: tuple[Any, ...], values: dict[str, Any]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if not parts:
        return "form"
    if parts[0] == "model":
        return "model_json" if values["model_json"] else "model"
    name = ".".join(parts[:2]) if parts[0] in ("training", "constraints", "cost") else parts[0]
    return name if name in FIELDS else "form"


def _add_validation_errors(exc: ValidationError, form: PlanForm) -> None:
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        message = plain_message(err)
        name = _error_name(loc, form.values)
        if not loc:
            for needle, where, words in _ROOT_ERRORS:
                if needle in message:
                    name, message = where, _(words)
                    break
        form.errors.add(name, message)


def _field_of(exc: EstimatorError, values: dict[str, Any]) -> str:
    name = exc.field or ""
    if name.startswith("model"):
        return "model_json" if values["model_json"] else "model"
    for candidate in FIELDS:
        if name == candidate or name.startswith(candidate + "."):
            return candidate
    if name.startswith("hardware.gpu"):
        return "constraints.gpus"
    return "form"


def _check_ids(form: PlanForm, catalog: Catalog) -> None:
    for name, known, what in (("constraints.gpus", catalog.gpus, "GPU"), ("constraints.servers", catalog.servers,
                                                                           "server")):
        unknown = [v for v in form.values[name] if v not in known]
        if unknown:
            form.errors.add(name, _("Unknown %(what)s %(names)s") % {
                "what": _(what), "names": ", ".join(repr(u) for u in unknown)})


def parse_plan_form(params: Mapping[str, Any], catalog: Catalog) -> PlanForm:
    """Turn the query parameters into a :class:`PlanRequest`, or into messages per field."""
    values: dict[str, Any] = {}
    for name in FIELDS:
        if name in LIST_FIELDS:
            values[name] = _list(params, name)
        else:
            raw = _text(params, name)
            values[name] = FORM_DEFAULTS[name] if raw is None else raw
    values["model"] = values["model"] or DEFAULT_MODEL
    sort = _text(params, "sort") or "rank"
    sort = sort if sort in COLUMN_KEYS else "rank"
    direction = _text(params, "dir") or "asc"
    direction = direction if direction in ("asc", "desc") else "asc"
    form = PlanForm(values, None, FormErrors(), sort, direction, _text(params, "from_estimate") or "")
    if values["question"] and values["question"] not in QUESTIONS:
        form.errors.add("question", _("Choose one of %(names)s") % {
            "names": ", ".join(repr(q) for q in QUESTIONS)})
    model_raw = _model_input(values, form.errors)
    _check_ids(form, catalog)
    if form.errors:
        return form
    try:
        model = _build_model(model_raw)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()))
            form.errors.add("model_json", f"{where}: {plain_message(err)}" if where else plain_message(err))
        return form
    data: dict[str, Any] = {"model": model, "training": {}, "constraints": {}, "cost": {}}
    for name in FIELDS:
        value = values[name]
        if name in ("model", "model_json") or value in ("", []):
            continue
        head, _sep, tail = name.partition(".")
        if tail:
            data[head][tail] = value
        else:
            data[head] = value
    if not data["cost"]:
        del data["cost"]
    try:
        form.request = (ReverseRequest if values["question"] else PlanRequest).model_validate(data)
    except ValidationError as exc:
        _add_validation_errors(exc, form)
    return form


# --- the result -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlanRow:
    """One row of the table: what it shows and the value each column sorts by (``None`` sorts last)."""

    plan: Plan
    gpu_name: str
    server_name: str | None
    sharding: str
    extra: str  # CP / EP / offload
    verdict: Any
    values: dict[str, Any]

    def sort_value(self, key: str) -> Any:
        return self.values[key]

    @property
    def gpu_short(self) -> str:
        """The GPU without its vendor (the table is wide)."""
        return re.sub(r"^(NVIDIA|AMD)\s+", "", self.gpu_name)


def _sharding(p: Plan) -> tuple[str, str]:
    lay = p.layout
    name = f"{_FRAMEWORK.get(lay.framework, lay.framework)} {_SHARDING.get(lay.sharding, lay.sharding)}"
    if lay.framework == "pytorch" and lay.sharding == "zero3":
        name = "FSDP2"
    if lay.framework == "pytorch" and lay.sharding == "hsdp":
        name = "FSDP2 HSDP"
    extra = [f"{k} {v}" for k, v in (("CP", lay.cp), ("EP", lay.ep)) if v > 1]
    if lay.offload != "none":
        extra.append(f"offload {lay.offload}")
    return name, " · ".join(extra)


def plan_rows(response: PlanResponse, catalog: Catalog) -> list[PlanRow]:
    rows = []
    for p in response.plans:
        lay, t, mem = p.layout, p.estimate.time, p.estimate.memory
        sharding, extra = _sharding(p)
        cost = None
        if p.cost is not None:
            cost = p.cost.cost_usd if p.cost.cost_usd is not None else p.cost.usd_per_million_tokens
        values: dict[str, Any] = {
            "rank": p.rank, "layout": p.label, "gpu": backend.gpu_name(catalog, lay.gpu),
            "nodes": lay.num_nodes * 1000 + lay.gpus_per_node, "sharding": sharding, "tp": lay.tp,
            "pp": lay.pp * 100 + lay.virtual_stages, "mbs": lay.micro_batch_size,
            "ckpt": _CKPT_ORDER.get(lay.activation_checkpointing, 9), "headroom": mem.headroom_bytes,
            "step": p.step_time_s, "tps": t.tokens_per_s if t is not None else None,
            "mfu": t.mfu if t is not None else None, "ttt": p.time_to_train_s, "cost": cost,
        }
        rows.append(PlanRow(p, values["gpu"], backend.server_name(catalog, lay.server), sharding, extra,
                            verdict_of(p.estimate), values))
    return rows


def sort_rows(rows: list[PlanRow], key: str, direction: str) -> list[PlanRow]:
    """Rows by one column; missing values last in either direction, then by rank."""
    present = [r for r in rows if r.sort_value(key) is not None]
    missing = [r for r in rows if r.sort_value(key) is None]
    present.sort(key=lambda r: r.plan.rank)
    present.sort(key=lambda r: r.sort_value(key), reverse=direction == "desc")
    return present + sorted(missing, key=lambda r: r.plan.rank)


@dataclass(frozen=True)
class ExportBlock:
    key: str
    title: str
    filename: str
    text: str


def _shell_lines(argv: list[str]) -> str:
    return " \\\n    ".join(shlex.quote(a) for a in argv)


def export_blocks(p: Plan) -> list[ExportBlock]:
    """Each export of a plan as text to copy."""
    e = p.exports
    blocks = []
    if e.deepspeed_config is not None:
        blocks.append(ExportBlock("deepspeed", N_("DeepSpeed config"), "ds_config.json",
                                  json.dumps(e.deepspeed_config, indent=2)))
    if e.accelerate_config_yaml:
        blocks.append(ExportBlock("accelerate", N_("accelerate config"), "accelerate_config.yaml",
                                  e.accelerate_config_yaml.rstrip()))
    blocks.append(ExportBlock("torchrun", N_("torchrun command"), N_("run on every node"),
                              _shell_lines(e.torchrun_argv) if e.torchrun_argv else e.torchrun))
    if e.megatron_args:
        blocks.append(ExportBlock("megatron", N_("Megatron-LM arguments"), N_("pretrain_gpt.py arguments"),
                                  " \\\n".join(shlex.quote(a) for a in e.megatron_args)))
    if e.environment:
        lines = []
        for var in e.environment:
            line = f"export {var.name}={shlex.quote(var.value)}"
            lines.append(line if var.when == "always" else f"# only {var.when}:\n# {line}")
        blocks.append(ExportBlock("nccl", N_("NCCL environment"), N_("set on every node"), "\n".join(lines)))
    return blocks


def _gpu_names(catalog: Catalog, response: PlanResponse) -> dict[str, str]:
    return {p.layout.gpu: backend.gpu_name(catalog, p.layout.gpu) for p in response.plans}


def result_context(form: PlanForm, response: PlanResponse, catalog: Catalog) -> dict[str, Any]:
    rows = sort_rows(plan_rows(response, catalog), form.sort, form.direction)
    fig = time_cost_figure(response.plans, _gpu_names(catalog, response), response.objective)
    return {
        "response": response,
        "rows": rows,
        "exports": {p.id: export_blocks(p) for p in response.plans},
        "estimate_urls": {p.id: "/estimate?" + request_to_query(p.request) for p in response.plans},
        "figs": {"plan": figure_json(fig)} if fig is not None else {},
        "per_run": axes_for(response.plans).per_run,
        "winner": response.plans[0] if response.plans else None,
        "winner_gpu": backend.gpu_name(catalog, response.plans[0].layout.gpu) if response.plans else "",
    }


def _answer_words(sentence: str) -> str:
    """The answer without its hardware (shown in the row's first cell): the estimator's ``answer`` clause."""
    if isinstance(sentence, Text) and "answer" in sentence.params:
        return str(sentence.params["answer"]) if not isinstance(sentence.params["answer"], Text) else \
            sentence.params["answer"]
    return sentence.split(": ", 1)[-1]


def reverse_context(reverse: ReverseResponse | None, catalog: Catalog) -> dict[str, Any]:
    """Rows of a reverse answer: per hardware option, its sentence and the plan to open in the estimator."""
    if reverse is None:
        return {}
    items: list[Any] = list(reverse.fewest_gpus or reverse.largest_model or reverse.longest_sequence or [])
    rows = []
    for item, sentence in zip(items, reverse.answers, strict=True):
        p: Plan | None = getattr(item, "plan", None)
        rows.append({"hardware": backend.server_name(catalog, item.server) if item.server
                     else backend.gpu_name(catalog, item.gpu), "answer": _answer_words(sentence),
                     "url": "/estimate?" + request_to_query(p.request) if p is not None else None})
    title = QUESTION_LABELS[reverse.question][0]
    return {"reverse_rows": rows, "reverse_title": title}


def _sort_links(form: PlanForm) -> dict[str, tuple[str, str | None]]:
    """Per column: the link that sorts by it (toggling when it is the current column) and its aria-sort."""
    links = {}
    for c in COLUMNS:
        if c.key == form.sort:
            nxt = "desc" if form.direction == "asc" else "asc"
            state: str | None = "ascending" if form.direction == "asc" else "descending"
        else:
            nxt, state = c.first_dir, None
        links[c.key] = ("/plan?" + form.query(sort=c.key, dir=nxt), state)
    return links


def form_context(form: PlanForm, catalog: Catalog) -> dict[str, Any]:
    return {
        "values": form.values,
        "errors": form.errors.messages,
        "fields": FIELDS,
        "dom_ids": {"form": "plan-form", **{name: dom_id(name) for name in FIELDS}},
        "models": backend.model_options(),
        "gpus": backend.gpu_options(catalog),
        "servers": backend.server_options(catalog),
        "methods": METHODS,
        "objectives": OBJECTIVES,
        "pricings": PRICINGS,
        "cost_fields": COST_FIELDS,
        "cost_open": any(n in form.errors.messages or form.values.get(n) for n in COST_FIELDS),
        "provider_classes": PROVIDER_CLASSES,
        "mechanisms": [{"value": k, "label": _(label), "detail": _(detail)}
                       for k, (label, detail) in MECHANISM_OPTIONS.items()],
        "from_estimate": form.from_estimate,
        "questions": QUESTION_LABELS,
        "columns": COLUMNS,
        "sort": form.sort,
        "direction": form.direction,
        "sort_links": _sort_links(form),
        "share_url": "/plan?" + form.query(),
    }


def run_plan_form(params: Mapping[str, Any], catalog: Catalog, progress_id: str | None = None) -> dict[str, Any]:
    form = parse_plan_form(params, catalog)
    context: dict[str, Any] = {"response": None, "reverse": None, "submitted": True}
    if isinstance(form.request, ReverseRequest):
        try:
            context["reverse"] = answer(form.request, catalog)
        except EstimatorError as exc:
            form.errors.add(_field_of(exc, form.values), exc.message)
        return {**form_context(form, catalog), **context, **reverse_context(context["reverse"], catalog)}
    if form.request is not None:
        report = PROGRESS.callback(progress_id) if progress_id else None
        try:
            response = usable_plan(form.request, catalog, report)
        except EstimatorError as exc:
            form.errors.add(_field_of(exc, form.values), exc.message)
        else:
            context.update(result_context(form, response, catalog))
            context.update(plan_vs_estimate(params, response, catalog, form.request))
    return {**form_context(form, catalog), **context}


def _progress_id(params: Mapping[str, Any]) -> str | None:
    value = _text(params, "progress")
    return value if value and _PROGRESS_ID.match(value) else None


@router.get("/plan", response_class=HTMLResponse, name="planner_page")
def planner_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    """The form alone on a first visit; with any parameter, the search and its result (the whole page, or for
    htmx the result fragment plus out-of-band field errors)."""
    params = request.query_params
    submitted = any(k in params for k in (*FIELDS, "sort", "dir"))
    if not submitted:
        form = parse_plan_form({}, catalog)
        context = {**form_context(form, catalog), "response": None, "reverse": None, "submitted": False}
    else:
        with request_budget(request.app.state.settings, "constraints.gpus"):
            context = run_plan_form(params, catalog, _progress_id(params))
    context.update(charts=True, active="plan")
    status = 422 if context["errors"] else 200
    if is_htmx(request):
        headers: dict[str, str] = {"HX-Push-Url": context["share_url"] if status == 200 else "false"}
        return render(request, "_plan_results.html", {**context, "oob": True}, **headers)
    return render(request, "plan.html", context, status_code=status)


@router.get("/plan/progress", name="planner_progress")
def planner_progress(id: str = "") -> JSONResponse:
    """How far the search ``id`` has got: ``{"done", "total", "screened", "exact", "text"}`` (null until it has
    started; ``screened``: layouts the vectorised screen checked, ``exact``: memory and step-time estimates)."""
    state = PROGRESS.get(id) if _PROGRESS_ID.match(id) else None
    detail = PROGRESS.detail(id) if state is not None else None
    done, total = state if state is not None else (None, None)
    screened, exact = detail if detail is not None else (None, None)
    return JSONResponse({"done": done, "total": total, "screened": screened, "exact": exact,
                         "text": progress_text(state, detail)},
                        headers={"Cache-Control": "no-store"})
