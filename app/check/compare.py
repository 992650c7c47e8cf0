"""A check's figures beside the estimate, part by part, as rows and as text (torch-free: the CLI prints these,
the tests read them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Row", "format_rows", "part_rows"]

#: the traced parts and the estimate's parts each is compared with (``app.check.trace.TRACED_PARTS``, kept here
#: without torch)
PART_MAP: dict[str, tuple[str, ...]] = {
    "parameters": ("parameters",),
    "gradients": ("gradients",),
    "optimizer_states": ("optimizer_states",),
    "activations": ("activations", "logits"),
    "temporary": ("temporary",),
}


@dataclass(frozen=True)
class Row:
    part: str
    measured: int | None
    estimated: int | None
    #: why the check cannot represent this part (then ``measured`` is None)
    unrepresented: str | None = None

    @property
    def difference(self) -> int | None:
        """estimated - measured, bytes."""
        if self.measured is None or self.estimated is None:
            return None
        return self.estimated - self.measured

    @property
    def larger(self) -> str:
        """Which side the difference comes from: the side with more bytes of this part."""
        d = self.difference
        if d is None:
            return "-"
        return "estimate" if d > 0 else "trace" if d < 0 else "equal"


def part_rows(measured: dict[str, Any], estimated: dict[str, Any]) -> list[Row]:
    """The peak first, then each traced part beside the sum of the estimate's parts it maps to, then what the
    check cannot represent (the estimate's figure beside the reason, no measured number)."""
    m_parts, e_parts = measured.get("parts_bytes", {}), estimated.get("parts_bytes", {})
    why: dict[str, str] = dict(measured.get("unrepresented", {}))
    rows = [Row("peak_allocated", measured.get("peak_allocated_bytes"), estimated.get("peak_allocated_bytes"))]
    for part, sources in PART_MAP.items():
        est = sum(int(e_parts.get(s, 0)) for s in sources) if e_parts else None
        rows.append(Row(part, m_parts.get(part), est, why.pop(part, None)))
    if m_parts and e_parts:
        # the trace splits by when a tensor was made (forward: activations; backward, step: temporary), the
        # estimate by what it is (the logits' gradient is under logits): their sums compare like for like
        traced = m_parts.get("activations", 0) + m_parts.get("temporary", 0)
        est = sum(int(e_parts.get(s, 0)) for s in ("activations", "logits", "temporary"))
        rows.append(Row("activations_and_temporary", traced, est))
    for part, value in m_parts.items():
        if part not in PART_MAP:
            rows.append(Row(part, value, None))
    for part, reason in why.items():
        rows.append(Row(part, None, e_parts.get(part), reason))
    return rows


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:9.3f}"


def format_rows(rows: list[Row]) -> str:
    """A plain-text table (GiB, 2**30 bytes): part, traced, estimated, estimated - traced, larger side; a part
    the check cannot represent shows its reason instead of a number."""
    lines = [f"{'part':26} {'traced GiB':>10} {'estimate GiB':>12} {'diff GiB':>9} {'diff %':>7}  larger side"]
    for r in rows:
        if r.unrepresented:
            lines.append(f"{r.part:26} {'n/a':>10} {_gib(r.estimated):>12}  not traced: {r.unrepresented}")
            continue
        d = r.difference
        pct = f"{d / r.measured * 100:+7.1f}" if d is not None and r.measured and r.measured >= 2**20 else "      -"
        lines.append(f"{r.part:26} {_gib(r.measured):>10} {_gib(r.estimated):>12} {_gib(d):>9} {pct}  {r.larger}")
    return "\n".join(lines)
