"""The whole node of one estimate: host RAM against the server's, NVMe, NICs, power, heat, air and the bill.

The GPUs are only part of the answer: a 70B full fine-tune with CPU offload fits 8x A100 80GB at 37 GiB per
GPU and needs about 1,157 GiB of host RAM per node. :func:`node_panel` puts the estimator's ``host`` block
next to what the chosen catalog server holds (``estimator.host.sizing.ram_limit``: its published maximum, or the
default ceiling when none is chosen) and says in one sentence whether the node works, and, when it does not,
which change does: a catalog server with the same GPU that holds the RAM, or less offload (re-estimated).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.i18n import N_
from app.core.i18n import gettext as _
from app.services.power import default_rack_kw, node_power, rack_fit
from app.web.forms import request_to_query
from app.web.templating import gib
from estimator import EstimateRequest, EstimateResponse, EstimatorError
from estimator.facility.airflow import DEFAULT_DELTA_T_K, airflow_cfm
from estimator.host.bom import choose_server
from estimator.host.sizing import RamLimit, ram_limit
from estimator.host_options import options_for
from estimator.job import job_of
from estimator.tco import TcoAssumptions
from estimator.training.suggest import apply_changes

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["NodeFix", "NodePanel", "NodeRow", "node_panel", "node_row", "sized_server"]

_BREAKDOWN_LABELS = {
    "framework_baseline": N_("Framework and CUDA context per process"),
    "nccl": N_("NCCL buffers"),
    "model_loading": N_("Model loading"),
    "offloaded_parameters": N_("Offloaded parameters"),
    "offloaded_gradients": N_("Offloaded gradients"),
    "offloaded_optimizer_states": N_("Offloaded optimizer states"),
    "offloaded_activations": N_("Offloaded activations"),
    "cpu_optimizer_temporary": N_("CPU optimizer temporaries"),
    "pinned_rounding": N_("Pinned-buffer rounding"),
    "checkpoint_staging": N_("Checkpoint staging"),
    "dataloader_workers": N_("Data-loader workers"),
    "os_reserved": N_("Operating system"),
}
_LESS_OFFLOAD = {"optimizer+params": ("optimizer", "none"), "optimizer": ("none",), "none": ()}
_OFFLOAD_WORDS = {"optimizer": N_("Offload the optimizer only"), "none": N_("No CPU offload")}


@dataclass(frozen=True)
class NodeFix:
    """A change that makes the node work, with the estimate that shows it."""

    summary: str
    detail: str
    url: str


@dataclass(frozen=True)
class NodePanel:
    tone: str  # ok | tight | bad
    label: str
    sentence: str
    ram_need_bytes: int
    ram_limit: RamLimit
    ram_fits: bool
    standin: bool
    ram_rows: list[tuple[str, int]]
    host: Any
    power_kw_peak: float
    power_kw_average: float
    btu_per_h: float
    cfm: float
    delta_t_k: float
    rack_kw_budget: float
    nodes_per_rack: int
    rack_kw: float
    rack_btu_per_h: float
    rack_cfm: float
    bom: list[dict[str, Any]]
    bom_total_usd: float | None  # the priced items
    bom_unpriced: int
    power_kw_at_load: float = 0.0
    utilisation: float = 0.8
    fixes: list[NodeFix] = field(default_factory=list)


def sized_server(catalog: Catalog, request: EstimateRequest, result: EstimateResponse) -> tuple[Any, bool]:
    """The server the estimator sized the host on, and whether it stands in for none chosen: the request's,
    else the catalog's cheapest carrying the GPU (``estimator.host.bom.choose_server``, as ``estimate`` does)."""
    chosen = catalog.servers.get(result.layout.server) if result.layout.server else None
    if chosen is not None:
        return chosen, False
    gpu = catalog.gpus.get(result.layout.gpu)
    standin = choose_server(job_of(request), None, gpu, catalog) if gpu is not None else None
    return standin, standin is not None


def _limit_words(limit: RamLimit, standin: bool) -> str:
    size = gib(limit.bytes, 0)
    if limit.known:
        if standin:
            text = (_("no server is chosen; sized on the %(server)s (the catalog's cheapest with these GPUs), which "
                      "has %(size)s") if limit.fixed else
                    _("no server is chosen; sized on the %(server)s (the catalog's cheapest with these GPUs), which "
                      "takes at most %(size)s"))
            return text % {"server": limit.server_name, "size": size}
        return (_("this server has %(size)s") if limit.fixed else _("this server takes at most %(size)s")) % {
            "size": size}
    return _("no server is chosen; a usual 2-socket server takes at most %(size)s") % {"size": size}


def _estimate_url(request: EstimateRequest, changes: dict[str, Any]) -> str:
    return f"/estimate?{request_to_query(apply_changes(request, changes))}"


def _server_fixes(catalog: Catalog, request: EstimateRequest, result: EstimateResponse, need: int,
                  current: str | None) -> list[NodeFix]:
    """Catalog servers with this GPU and GPU count whose RAM holds ``need``, smallest first."""
    gpus = result.layout.world_size // max(1, request.hardware.num_nodes)
    out: list[tuple[int, NodeFix]] = []
    for s in catalog.servers.values():
        if s.id == current or s.gpu_id != result.layout.gpu or int(s.gpu_count) < gpus:
            continue
        limit = ram_limit(s)
        if limit.known and limit.fits(need):
            detail = (_("it ships with %(size)s of host RAM") if limit.fixed else
                      _("it takes up to %(size)s of host RAM")) % {"size": gib(limit.bytes, 0)}
            out.append((limit.bytes, NodeFix(_("Use the %(server)s") % {"server": s.name}, detail,
                                             _estimate_url(request, {"hardware.server": s.id,
                                                                     "hardware.gpu": s.gpu_id}))))
    return [fix for _, fix in sorted(out, key=lambda t: t[0])[:3]]


def _offload_fixes(catalog: Catalog, request: EstimateRequest, limit: RamLimit) -> list[NodeFix]:
    """Less CPU offload, re-estimated: kept when the GPUs still fit (or fit with full checkpointing) and the host
    RAM then fits the same limit."""
    from app.web import backend

    out: list[NodeFix] = []
    for level in _LESS_OFFLOAD.get(request.parallelism.offload, ()):
        for extra in ({}, {"training.activation_checkpointing": "full"}):
            changes = {"parallelism.offload": level, **extra}
            try:
                trial = apply_changes(request, changes)
                res = backend.run_estimate(trial, catalog)
            except (EstimatorError, ValueError):
                continue
            if res.host is None or not res.memory.fits or not limit.fits(res.host.ram_bytes_per_node):
                continue
            words = _(_OFFLOAD_WORDS[level]) + (_(" and full activation checkpointing") if extra else "")
            detail = _("%(gpu)s per GPU, %(host)s of host RAM per node") % {
                "gpu": gib(res.memory.total_bytes), "host": gib(res.host.ram_bytes_per_node, 0)}
            out.append(NodeFix(words, detail, f"/estimate?{request_to_query(trial)}"))
            break
        if out:
            break
    return out


def _node_fixes(catalog: Catalog, request: EstimateRequest, limit: RamLimit) -> list[NodeFix]:
    """Twice the nodes, re-estimated: sharded (ZeRO-3 / FSDP) offload splits the host RAM over the nodes."""
    from app.web import backend

    nodes = request.hardware.num_nodes * 2
    try:
        trial = apply_changes(request, {"hardware.num_nodes": nodes})
        res = backend.run_estimate(trial, catalog)
    except (EstimatorError, ValueError):
        return []
    if res.host is None or not res.memory.fits or not limit.fits(res.host.ram_bytes_per_node):
        return []
    detail = _("%(host)s of host RAM per node, %(gpu)s per GPU") % {
        "host": gib(res.host.ram_bytes_per_node, 0), "gpu": gib(res.memory.total_bytes)}
    return [NodeFix(_("Use %(n)s nodes") % {"n": nodes}, detail, f"/estimate?{request_to_query(trial)}")]


def _tco_assumptions(request: EstimateRequest) -> TcoAssumptions:
    """The TCO assumptions the job's cost choice states (its utilisation), else the defaults."""
    util = request.cost.utilisation if request.cost is not None else None
    return TcoAssumptions(utilisation=util) if util is not None else TcoAssumptions()


def node_panel(catalog: Catalog, request: EstimateRequest, result: EstimateResponse) -> NodePanel | None:
    """The whole-node panel of one estimate (``None`` when the estimator sized no host)."""
    host = result.host
    if host is None:
        return None
    server, standin = sized_server(catalog, request, result)
    limit = ram_limit(server)
    need = int(host.ram_bytes_per_node)
    ram_fits = limit.fits(need)
    gpus_fit = result.memory.fits
    has = _limit_words(limit, standin)
    args = {"need": gib(need, 0), "has": has}
    fixes: list[NodeFix] = []
    if not ram_fits:
        tone, label = "bad", N_("Host does not fit")
        sentence = (_("The GPUs fit, the host does not: needs %(need)s of host RAM per node; %(has)s.") if gpus_fit
                    else _("Neither the GPUs nor the host fit: needs %(need)s of host RAM per node; %(has)s.")) % args
        fixes = (_server_fixes(catalog, request, result, need, getattr(server, "id", None))
                 + _offload_fixes(catalog, request, limit) + _node_fixes(catalog, request, limit))
    elif not limit.known:
        tone, label = "tight", N_("Check the server")
        sentence = (_("The job needs %(need)s of host RAM per node; %(has)s. Pick a server that holds it.")
                    if gpus_fit else
                    _("The GPUs do not fit; the host needs %(need)s of host RAM per node (%(has)s).")) % args
        fixes = _server_fixes(catalog, request, result, need, None)
    elif standin:
        tone = "ok" if host.fits_server else "tight"
        label = N_("Node fits") if host.fits_server else N_("Host needs attention")
        sentence = (_("The job needs %(need)s of host RAM per node; %(has)s.") % args
                    + ("" if gpus_fit else " " + _("The GPUs do not fit, see above.")))
    elif not host.fits_server:
        tone, label = "tight", N_("Host needs attention")
        sentence = _("Host RAM fits (%(need)s per node; %(has)s); see the storage and network notes below.") % args
    else:
        tone, label = "ok", N_("Node fits")
        sentence = (_("The node needs %(need)s of host RAM; %(has)s.") % args
                    + ("" if gpus_fit else " " + _("The GPUs do not fit, see above.")))
    rows = sorted(((_BREAKDOWN_LABELS.get(k, k.replace("_", " ").capitalize()), int(v))
                   for k, v in host.ram_breakdown_bytes.items() if v > 0), key=lambda r: -r[1])
    opts = options_for(request).resolved()
    rack_budget = float(opts.rack_kw_budget or default_rack_kw())
    # power and rack: one function each (app.services.power), the same figures and labels as /tco
    power = node_power(catalog, request.hardware.server, _tco_assumptions(request), gpu_id=result.layout.gpu,
                       gpus_per_node=request.hardware.gpus_per_node)
    peak_w = power.peak_kw * 1000
    per_rack = (rack_fit(catalog, request.hardware.server, rack_budget).nodes_per_rack
                if request.hardware.server else int(host.nodes_per_rack))
    bom = list(result.bill_of_materials)
    priced = [b for b in bom if b.get("unit_price_usd") is not None]
    total = sum(float(b["unit_price_usd"]) * int(b.get("quantity", 1)) for b in priced)  # type: ignore[arg-type]
    return NodePanel(
        tone=tone, label=label, sentence=sentence, ram_need_bytes=need, ram_limit=limit, ram_fits=ram_fits,
        standin=standin, ram_rows=rows, host=host, power_kw_peak=peak_w / 1000,
        power_kw_average=power.average_kw, power_kw_at_load=power.at_load_kw, utilisation=power.utilisation,
        btu_per_h=float(host.power_btu_per_h), cfm=airflow_cfm(peak_w), delta_t_k=DEFAULT_DELTA_T_K,
        rack_kw_budget=rack_budget, nodes_per_rack=per_rack, rack_kw=per_rack * peak_w / 1000,
        rack_btu_per_h=per_rack * float(host.power_btu_per_h), rack_cfm=per_rack * airflow_cfm(peak_w),
        bom=bom, bom_total_usd=total if priced else None, bom_unpriced=len(bom) - len(priced), fixes=fixes)


@dataclass(frozen=True)
class NodeRow:
    """One option's node figures on ``/compare``."""

    tone: str
    label: str
    ram_need_bytes: int
    ram_limit: RamLimit
    power_kw_peak: float
    btu_per_h: float
    nodes_per_rack: int
    nvme: str


def node_row(catalog: Catalog, request: EstimateRequest, result: EstimateResponse) -> NodeRow | None:
    host = result.host
    if host is None:
        return None
    limit = ram_limit(sized_server(catalog, request, result)[0])
    need = int(host.ram_bytes_per_node)
    if not limit.fits(need):
        tone, label = "bad", N_("Host RAM short")
    elif not limit.known:
        tone, label = "tight", N_("No server: check")
    elif not host.fits_server:
        tone, label = "tight", N_("Storage/network")
    else:
        tone, label = "ok", N_("Node fits")
    return NodeRow(tone, label, need, limit, float(host.power_w_per_node) / 1000, float(host.power_btu_per_h),
                   int(host.nodes_per_rack), host.recommended_nvme or "–")
