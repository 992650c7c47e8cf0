"""Is the node healthy? nccl-tests output read and compared with the published bus bandwidth: :func:`check_nccl`.

Reads the text ``all_reduce_perf`` / ``all_gather_perf`` / ``reduce_scatter_perf`` / ``alltoall_perf`` print
(one or several runs in one file; mpirun's ``[0]`` output tags are dropped): each result row's size, algbw and
busbw (out-of-place and in-place; the better one counts), the ``Using devices`` lines (GPUs, hosts, GPU name),
the collective (from ``*_perf`` in the command line or ``Collective test starting``, else the caller's) and
whether ``NCCL_ALGO=Ring`` was set.

Expected bus bandwidth (busbw, GB/s; nccl-tests doc/PERFORMANCE.md defines it so that it is comparable across GPU
counts):

* **In one node**: the catalog's ``collective_efficiency`` row for the server's GPU fabric
  (:meth:`hardware_catalog.Catalog.fabric_for`): 8x H100 NVLink 4: all-reduce ~476-480 (NVLink SHARP),
  ring collectives and ``NCCL_ALGO=Ring`` ~370 (NVIDIA/nccl-tests issue 212, sjeaugey: 450 GB/s line rate less
  ~20 % protocol); 8x H200 ~475 (nccl-tests issue 272). A collective the fabric has no row for takes the row of a
  fabric with the same NVLink generation and switch (H200 -> H100), alltoall that of all-gather (uncertain).
* **Across nodes**: the node's NICs: GPU-fabric NICs x the measured per-NIC figure (InfiniBand NDR 400G:
  46-48 GB/s, nccl-tests issue 290; the low end is used), else line rate x 46/50; capped by the in-node ring
  figure. alltoall: one NIC's share per GPU.
* **Sizes**: below 64 MB a row is not judged; the verdict is the peak over rows of 256 MB and more ("256M is
  too small to reach peak bandwidth", nccl-tests issue 212). Healthy at 90 % of the expectation or better.
* **Trap**: two nodes without ``NCCL_ALGO=Ring`` run all-reduce as a tree (or NVLS-tree), which "can reach up to
  2x the network bandwidth" (NVIDIA/nccl issue 307, sjeaugey): above 115 % of the expectation it is reported as
  overstated, with the command to rerun.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final, Literal

from estimator.cluster.contract import NcclCheck, NcclRow, NcclTest
from estimator.errors import InvalidRequestError
from estimator.training.comm import scale_up_gpus

if TYPE_CHECKING:
    from hardware_catalog import Catalog, Server

RowStatus = Literal["ok", "low", "small", "above"]
Verdict = Literal["healthy", "degraded", "overstated", "unknown"]

__all__ = ["COLLECTIVES", "NcclParseError", "ParsedRun", "check_nccl", "expected_busbw", "parse_nccl_tests"]

COLLECTIVES: Final = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
HEALTHY: Final = 0.9
OVERSTATED: Final = 1.15
SMALL_BYTES: Final = 64 * 2**20
PEAK_BYTES: Final = 256 * 2**20
#: NDR 400G: 46 of 50 GB/s line rate reached per NIC (nccl-tests issue 290)
NIC_EFFICIENCY: Final = 46.0 / 50.0
_TYPES: Final = frozenset({"float", "half", "bfloat16", "double", "int8", "uint8", "int32", "uint32", "int64",
                           "uint64", "int", "fp8_e4m3", "fp8_e5m2", "char", "float32", "float16"})
_TAG: Final = re.compile(r"\[\d+\]")
_PERF: Final = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall)_perf\b")
_RANK: Final = re.compile(r"#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+)$")
_AVG: Final = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")


class NcclParseError(InvalidRequestError):
    """The text has no nccl-tests result row (names the field ``file``)."""


class ParsedRun:
    """One nccl-tests run: its rows (size, algbw, best busbw) and what its header says."""

    def __init__(self, collective: str | None) -> None:
        self.collective = collective
        self.rows: list[tuple[int, float, float]] = []
        self.hosts: list[str] = []
        self.gpu_name: str | None = None
        self.ranks = 0
        self.ring = False
        self.avg_busbw: float | None = None


def _float(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _row(line: str) -> tuple[int, float, float] | None:
    tokens = _TAG.sub(" ", line).split()
    if len(tokens) < 11 or not tokens[0].isdigit() or not tokens[1].isdigit() or tokens[2] not in _TYPES:
        return None
    tail = tokens[-8:]
    algbw, oop, ip = _float(tail[1]), _float(tail[2]), _float(tail[6])
    if algbw is None or oop is None or ip is None:
        return None
    return int(tokens[0]), algbw, max(oop, ip)


def parse_nccl_tests(text: str, collective: str | None = None) -> list[ParsedRun]:
    """Every run in ``text``; raises :class:`NcclParseError` when there is no result row at all."""
    runs: list[ParsedRun] = []
    pending = collective
    ring = "NCCL_ALGO=RING" in text.upper().replace(" ", "")
    current: ParsedRun | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        found = _PERF.search(line)
        if found and (current is None or current.rows):
            pending = collective or found.group(1)
        if "Collective test starting" in line and found:
            pending = collective or found.group(1)
            if current is not None and not current.rows:  # printed after this run's header
                current.collective = pending
        if line.lstrip().startswith("# nThread") or (current is None and _row(line) is not None):
            current = ParsedRun(pending)
            current.ring = ring
            runs.append(current)
        if current is None:
            continue
        rank = _RANK.search(line)
        if rank:
            current.ranks += 1
            if rank.group(1) not in current.hosts:
                current.hosts.append(rank.group(1))
            current.gpu_name = rank.group(2).strip()
            continue
        avg = _AVG.search(line)
        if avg:
            current.avg_busbw = float(avg.group(1))
            continue
        row = _row(line)
        if row is not None:
            current.rows.append(row)
    runs = [r for r in runs if r.rows]
    if not runs:
        raise NcclParseError("no nccl-tests result rows found: expected lines such as '  8589934592  2147483648  "
                             "float  sum  -1  31533  272.41  476.72  0  ...' from all_reduce_perf, all_gather_perf, "
                             "reduce_scatter_perf or alltoall_perf", "file")
    return runs


def _gpu_gen(catalog: Catalog, fabric: str) -> tuple[str, int] | None:
    for m in catalog.collective_efficiency:
        if m.fabric == fabric and m.gpu_ids and m.gpu_fabric is not None:
            gpu = catalog.gpus.get(m.gpu_ids[0])
            return (str(m.gpu_fabric), int(gpu.nvlink_gen or 0)) if gpu is not None else None
    return None


def _row_for(catalog: Catalog, fabric: str, collective: str, ring: bool) -> tuple[float, str] | None:
    name = "all_gather" if collective == "alltoall" else collective
    rows = catalog.collectives(fabric, name)
    if ring:
        rows = [m for m in rows if m.algorithm == "ring"] or []
    chosen = [m for m in rows if m.representative] or rows
    if not chosen:
        return None
    m = chosen[0]
    return float(m.busbw_gbps), str(m.sources[0].citation)


def _in_node(catalog: Catalog, server: Server, collective: str, ring: bool) -> tuple[float, str] | None:
    fabric = catalog.fabric_for(server.id)
    if fabric is None:
        return None
    found = _row_for(catalog, fabric, collective, ring)
    if found is None:
        kin = _gpu_gen(catalog, fabric)
        for other in sorted({m.fabric for m in catalog.collective_efficiency}):
            if other != fabric and kin is not None and _gpu_gen(catalog, other) == kin:
                found = _row_for(catalog, other, collective, ring)
                if found is not None:
                    found = (found[0], f"{found[1]} (same NVLink generation and switch as {fabric})")
                    break
    if found is not None and collective == "alltoall":
        found = (found[0], f"{found[1]} (alltoall taken at the all-gather figure: uncertain)")
    return found


def _per_nic(catalog: Catalog, server: Server) -> tuple[int, float, str]:
    nics = [n for n in server.nics if n.purpose == "gpu-fabric"]
    rails = sum(int(n.count) for n in nics)
    if not nics:
        return 0, 0.0, ""
    gbit = float(nics[0].gbps)
    ndr = catalog.interconnects.get("ib-ndr")
    if ndr is not None and ndr.gbit_per_port == gbit and ndr.measured_gbps_per_direction_low is not None:
        src = ndr.sources_for("measured_gbps_per_direction_low")
        return rails, float(ndr.measured_gbps_per_direction_low), str(src[0].citation)
    return rails, gbit / 8 * NIC_EFFICIENCY, "line rate x 46/50 (NDR's measured share, NVIDIA/nccl-tests issue 290)"


def expected_busbw(catalog: Catalog, server: Server, collective: str, n_nodes: int, ring: bool
                   ) -> tuple[float | None, str | None, str]:
    """(expected busbw GB/s or None, its source, the path in words) for ``collective`` on ``n_nodes`` servers."""
    local = _in_node(catalog, server, collective, ring or n_nodes > 1)
    if n_nodes <= 1:
        path = f"in one node: {server.gpu_count} GPUs over {server.gpu_fabric}"
        return (local[0], local[1], path) if local else (None, None, path)
    domain = scale_up_gpus(server, server.gpu_count)
    if n_nodes * server.gpu_count <= domain:
        # trays of one NVLink domain (NVL72): NCCL runs the collective over multi-node NVLink, not the NICs
        path = (f"inside one NVLink domain of {domain} GPUs across {n_nodes} nodes (multi-node "
                "NVLink; a run with NCCL_MNNVL_ENABLE=0 measures the NICs instead)")
        return (local[0], local[1], path) if local else (None, None, path)
    rails, per_nic, src = _per_nic(catalog, server)
    if rails == 0:
        return None, None, "across nodes: the server has no GPU-fabric NIC"
    network = rails * per_nic
    if collective == "alltoall":
        network = per_nic * rails / max(1, server.gpu_count)
    path = f"across {n_nodes} nodes: {rails} NICs per node at {per_nic:.0f} GB/s each"
    value = network if local is None else min(network, local[0])
    return value, src, path


def _causes(collective: str, n_nodes: int, peak: float, ring_figure: float | None, expected: float) -> list[str]:
    if n_nodes > 1:
        return [
            "a NIC down or trained at a lower rate: `ibstat` (State Active, Rate 400), `ibdev2netdev`",
            "GPU / NIC / NUMA mapping: ranks not next to their rail's NIC (NCCL_IB_HCA, `mpirun --bind-to numa`, "
            "NCCL_TOPO_FILE in VMs); NCCL_DEBUG=INFO shows which NIC each channel uses",
            "GPUDirect RDMA off: nvidia-peermem not loaded (NCCL_DEBUG=INFO prints 'GDRDMA' when it is on)",
            "congestion between leaves: adaptive routing off, oversubscribed or cross-rack uplinks; UFM / switch "
            "port counters (NCCL_IB_ADAPTIVE_ROUTING)",
            "RoCE only: PFC / ECN not configured, or NCCL_IB_GID_INDEX not the RoCE v2 GID (3)",
        ]
    out = []
    if collective == "all_reduce" and ring_figure is not None and expected > ring_figure * 1.1 \
            and 0.85 * ring_figure <= peak <= 1.08 * ring_figure:
        out.append(f"all-reduce at the ring figure (~{ring_figure:.0f} GB/s): NVLink SHARP is not in use "
                   "(NCCL_NVLS_ENABLE=0, nvidia-fabricmanager not running, or NCCL older than 2.17)")
    out += [
        "peer-to-peer off (NCCL_P2P_DISABLE=1, or ACS / IOMMU in a VM): traffic through host memory over PCIe; "
        "NCCL_DEBUG=INFO says 'via SHM' instead of 'P2P/direct pointer' or 'NVLS'",
        "an NVLink or a GPU down: `nvidia-smi nvlink --status`, `nvidia-smi topo -m` (NV18 between every pair on "
        "H100), `dcgmi diag -r 3`",
        "GPU clocks or power capped: `nvidia-smi -q -d CLOCK,POWER` (thermal or power-brake slowdown)",
        "fewer GPUs in the test than the node has: the figure is for all of them (-g / -np)",
    ]
    return out


def _judge(catalog: Catalog, server: Server, run: ParsedRun, n_nodes: int, n_gpus: int | None) -> NcclTest:
    collective = run.collective or "all_reduce"
    expected, source, path = expected_busbw(catalog, server, collective, n_nodes, run.ring)
    ring_local = _in_node(catalog, server, collective, True)
    rows = []
    for size, algbw, busbw in run.rows:
        ratio = None if expected is None else busbw / expected
        status: RowStatus = "small" if size < SMALL_BYTES else "ok"
        if status == "ok" and ratio is not None:
            status = "above" if ratio > OVERSTATED else ("low" if ratio < HEALTHY else "ok")
        rows.append(NcclRow(size_bytes=size, algbw_gbps=algbw, busbw_gbps=busbw, expected_busbw_gbps=expected,
                            ratio=ratio, status=status))
    peak_size, _, peak = max(run.rows, key=lambda r: (r[2], r[0]))
    large = [r for r in run.rows if r[0] >= PEAK_BYTES]
    judged = max((r[2] for r in large), default=None)
    causes: list[str] = []
    verdict: Verdict
    if expected is None:
        verdict, summary = "unknown", f"peak {peak:.1f} GB/s; no published figure for this server and path"
    elif judged is None:
        verdict = "unknown"
        summary = (f"peak {peak:.1f} GB/s at {peak_size:,} bytes, but no size of 256 MB or more: messages below a "
                   "few hundred MB do not reach the peak; rerun with -e 8G")
    elif judged > OVERSTATED * expected and n_nodes == 2 and collective == "all_reduce" and not run.ring:
        verdict = "overstated"
        summary = (f"{judged:.1f} GB/s is {judged / expected:.0%} of the expected {expected:.0f} GB/s: two nodes run "
                   "all-reduce as a tree, which can reach twice the network bandwidth; rerun with NCCL_ALGO=Ring")
    elif judged >= HEALTHY * expected:
        verdict = "healthy"
        summary = f"healthy: {judged:.1f} GB/s peak is {judged / expected:.0%} of the expected {expected:.0f} GB/s"
    else:
        verdict = "degraded"
        summary = (f"degraded: {judged:.1f} GB/s peak is {judged / expected:.0%} of the expected {expected:.0f} GB/s "
                   f"({1 - judged / expected:.0%} below)")
        causes = _causes(collective, n_nodes, judged, ring_local[0] if ring_local else None, expected)
    return NcclTest(collective=collective, n_gpus=n_gpus, n_nodes=n_nodes, gpu_name=run.gpu_name,
                    algorithm_env="NCCL_ALGO=Ring" if run.ring else None, peak_busbw_gbps=peak,
                    peak_size_bytes=peak_size, expected_busbw_gbps=expected, expectation_source=source, path=path,
                    verdict=verdict, summary=summary, causes=causes, rows=rows)


def check_nccl(text: str, server: Server, catalog: Catalog, nodes: int | None = None, gpus: int | None = None,
               collective: str | None = None) -> NcclCheck:
    """Judge every run in ``text`` against ``server`` (its GPUs, NVLink fabric and NICs). ``nodes`` / ``gpus``
    apply when the text has no ``Using devices`` lines (its own count wins otherwise)."""
    if collective is not None and collective not in COLLECTIVES:
        raise InvalidRequestError(f"collective must be one of {', '.join(COLLECTIVES)}, not {collective!r}",
                                  "collective")
    if nodes is not None and nodes < 1:
        raise InvalidRequestError(f"nodes must be at least 1, not {nodes}", "nodes")
    tests = []
    warnings: list[str] = []
    for run in parse_nccl_tests(text, collective):
        n_nodes = len(run.hosts) if run.hosts else (nodes or 1)
        n_gpus = run.ranks if run.ranks else gpus
        if run.collective is None:
            warnings.append("the collective is not named in the text (no *_perf command line): read as all_reduce; "
                            "pass the collective to change it")
        if n_nodes == 2 and not run.ring and (run.collective or "all_reduce") == "all_reduce":
            warnings.append("two nodes without NCCL_ALGO=Ring: NCCL may pick tree / NVLS-tree and report up to twice "
                            "the network bandwidth (NVIDIA/nccl issue 307); rerun with NCCL_ALGO=Ring to judge the "
                            "network")
        if run.gpu_name and server.gpu_id.split("-")[0].lower() not in run.gpu_name.lower():
            warnings.append(f"the log's GPUs are {run.gpu_name!r}; the expectation is for {server.name}")
        tests.append(_judge(catalog, server, run, n_nodes, n_gpus))
    return NcclCheck(tests=tests, warnings=list(dict.fromkeys(warnings)),
                     healthy=all(t.verdict == "healthy" for t in tests))
