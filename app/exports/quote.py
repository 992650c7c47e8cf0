"""The customer-ready quote: one saved revision in words a customer reads (display names, never catalog ids),
as printable HTML and as a PDF (WeasyPrint, on Debian's Pango).

What it says: the job (model, method, tokens, sequence length, batch), the layout (nodes x GPUs, parallelism),
per-GPU memory and whether it fits (with its error bar), time to train (with its error bar), GPU-hours,
energy, the cost basis and total, the quoted price, the date it is valid until, and the assumptions; with a
serving line, the engine, workload, tokens/s, latency, $ per million tokens and the node's yearly capacity.
Money, counts and percentages come from :mod:`app.formatting` (Babel), as on the pages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from app.formatting import count, money, percent, price, rate

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["QUOTE_VALID_DAYS", "Line", "display_names", "quote_sections", "serving_lines"]

#: what a quoted price is, said next to it (the cost to train below is the estimate, not the offer)
PRICE_COVERS = ("the price offered for the option named here, as agreed with the seller; the cost to train below "
                "is capplan's estimate of running this job, for comparison, and not part of the offer")
#: a quote is valid for this many days from the revision's date (prices in the catalog move)
QUOTE_VALID_DAYS = 30
GIB = 2**30


@dataclass(frozen=True)
class Line:
    label: str
    value: str


def _duration(seconds: float | None) -> str:
    """The pages' own duration (app.web.templating.duration): one figure reads the same on the quote."""
    if seconds is None:
        return "n/a"
    from app.web.templating import duration

    return duration(seconds)


def _gib(value: Any) -> str:
    return f"{value / GIB:,.1f} GiB" if isinstance(value, int | float) else "n/a"


def display_names(catalog: Catalog | None) -> dict[str, str]:
    """Every catalog id (GPU, server, cloud offer) to its display name, longest id first."""
    if catalog is None:
        return {}
    names: dict[str, str] = {}
    for gpu in getattr(catalog, "gpus", {}).values():
        names[str(gpu.id)] = str(gpu.name)
    for server in getattr(catalog, "servers", {}).values():
        names[str(server.id)] = str(server.name)
    for offer in getattr(catalog, "cloud_offers", []):
        names[str(offer.id)] = f"{offer.provider} {getattr(offer, 'instance', '')}".strip()
    return dict(sorted(names.items(), key=lambda kv: -len(kv[0])))


#: references to the project's own files (``(docs/accuracy.md)``): internal, never on a customer document
_INTERNAL = re.compile(r"\s*\((?:see )?(?:docs|estimator|benchmarks)/[\w./#-]+\)"
                       r"|\s*(?:docs|estimator)/[\w./#-]+\.(?:md|json|py)")


def customer_text(text: Any) -> str:
    """``text`` without references to the project's internal files."""
    return _INTERNAL.sub("", str(text))


def named(text: Any, names: dict[str, str]) -> str:
    """``text`` with every catalog id replaced by its display name (and no internal file references)."""
    out = customer_text(text)
    if not names:
        return out
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(k) for k in names) + r")(?![\w-])")
    return pattern.sub(lambda m: names[m.group(1)], out)


def _model_name(inputs: dict[str, Any], result: dict[str, Any]) -> str:
    model = result.get("model", {})
    return str(model.get("name") or inputs.get("model") or "custom model")


def _job(inputs: dict[str, Any], result: dict[str, Any]) -> list[Line]:
    t = inputs.get("training", {})
    model = result.get("model", {})
    method = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}.get(str(t.get("method")), "fine-tune")
    lines = [Line("Model", f"{_model_name(inputs, result)} ({count(model.get('total_params'))} parameters)"),
             Line("Method", f"{method}, {t.get('precision', 'bf16-mixed')}, {t.get('optimizer', 'adamw')}")]
    if t.get("train_tokens"):
        lines.append(Line("Tokens to train on", count(t.get("train_tokens"))))
    lines.append(Line("Sequence length", f"{count(t.get('seq_len'))} tokens"))
    lines.append(Line("Batch", f"micro-batch {count(t.get('micro_batch_size'))} per GPU, gradient accumulation "
                               f"{count(t.get('gradient_accumulation_steps'))}"))
    return lines


def _layout(inputs: dict[str, Any], result: dict[str, Any], names: dict[str, str]) -> list[Line]:
    lay = result.get("layout", {})
    hardware = names.get(str(lay.get("server")), "") if lay.get("server") else ""
    gpu = names.get(str(lay.get("gpu")), "the chosen GPU")
    gpus = int(lay.get("world_size") or 0)
    per_node = result.get("host") or {}
    nodes = int((inputs.get("hardware") or {}).get("num_nodes") or 1)
    where = f"{count(nodes)} x {hardware}: {gpus} x {gpu}" if hardware else f"{gpus} x {gpu}"
    parts = [f"data parallel {lay.get('dp')}"] + [f"{k} {lay.get(v)}" for k, v in
                                                  (("tensor parallel", "tp"), ("pipeline parallel", "pp"),
                                                   ("context parallel", "cp"), ("expert parallel", "ep"))
                                                  if (lay.get(v) or 1) > 1]
    p = inputs.get("parallelism") or {}
    offload = str(p.get("offload") or "none")
    extra = f"; {offload} offloaded to CPU memory" if offload != "none" else ""
    framework = f" ({p.get('framework')})" if p.get("framework") else ""
    lines = [Line("Hardware", where), Line("Parallelism", ", ".join(parts) + f"; sharding {lay.get('sharding')}"
                                            + framework + extra)]
    if per_node.get("recommended_ram_gib"):
        lines.append(Line("Host RAM per node", f"{count(per_node['recommended_ram_gib'])} GiB recommended"))
    return lines


def _memory(result: dict[str, Any]) -> list[Line]:
    m = result.get("memory", {})
    bar = f" (± {percent((m.get('error_bar_pct') or 0) / 100)})" if m.get("error_bar_pct") is not None else ""
    return [Line("Per-GPU memory", f"{_gib(m.get('total_bytes'))}{bar} of {_gib(m.get('capacity_bytes'))}"),
            Line("Fits", "yes" if m.get("fits") else "no: this setup does not run; see the suggestions"),
            Line("Headroom", _gib(m.get("headroom_bytes")))]


def _time_and_cost(result: dict[str, Any], fits: bool) -> list[Line]:
    if not fits:
        return [Line("Time and cost", "not given: the setup does not fit in GPU memory")]
    time, train, cost = result.get("time") or {}, result.get("train") or {}, result.get("cost") or {}
    bar = (time.get("error_bar_pct") or 0) / 100
    lines = []
    if train:
        seconds = train.get("time_to_train_s")
        lines += [Line("Time to train", f"{_duration(seconds)} (± {percent(bar)}: "
                                        f"{_duration(seconds * (1 - bar))} to {_duration(seconds * (1 + bar))})"),
                  Line("GPU-hours", count(train.get("gpu_hours"))),
                  Line("Energy (IT, at the servers)", f"{count(train.get('energy_kwh'))} kWh")]
    if cost:
        what = cost.get("label") if cost.get("basis") == "own" else f"rented: {cost.get('label')}"
        dated = f"price of {cost['date']}" if cost.get("date") else "price estimated, no catalog date"
        lines.append(Line("Cost basis", f"{what} at {rate(cost.get('usd_per_gpu_hour'))} per GPU-hour "
                                        f"({cost.get('confidence')} confidence, {dated})"))
        total = cost.get("total_usd")
        if total is not None:
            lines.append(Line("Cost to train", f"{money(total)} (± {percent(bar)}: {money(total * (1 - bar))} "
                                                f"to {money(total * (1 + bar))})"))
    else:
        lines.append(Line("Cost basis", "no price in the catalog for this hardware"))
    return lines


def _big(value: Any) -> str:
    """A yearly token count in words a customer reads ("3.1 trillion", "850 billion")."""
    if not isinstance(value, int | float):
        return "n/a"
    for size, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
        if value >= size:
            return f"{value / size:,.1f} {word}"
    return count(value)


def serving_lines(inputs: dict[str, Any] | None, result: dict[str, Any] | None,
                  names: dict[str, str]) -> list[Line]:
    """The quote's serving line (an inference estimate stored with it): engine and layout, the workload, speed,
    $ per million tokens and the node's yearly capacity, each with its error bar; ``[]`` when it has none."""
    if not inputs or not result:
        return []
    s, w = inputs.get("serving") or {}, inputs.get("workload") or {}
    gpu = names.get(str(result.get("gpu")), str(result.get("gpu")))
    server = names.get(str(result.get("server")), "") if result.get("server") else ""
    engine = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}.get(str(result.get("engine")),
                                                                                      str(result.get("engine")))
    tp, pp = s.get("tensor_parallel_size", 1), s.get("pipeline_parallel_size", 1)
    where = f"{server}: " if server else ""
    lines = [Line("Engine", f"{engine}, {where}{gpu}, tensor parallel {tp}"
                            + (f" x pipeline parallel {pp}" if pp > 1 else "")
                            + f", weights {s.get('weights', 'bf16')}, KV cache {s.get('kv_cache_dtype', 'auto')}"),
             Line("Workload", f"{count(w.get('input_tokens'))} input + {count(w.get('output_tokens'))} output "
                              f"tokens a request, context up to {count(s.get('max_model_len'))}")]
    if not result.get("starts"):
        why = "; ".join(str(e) for e in result.get("errors", [])) or "it does not fit"
        return [*lines, Line("Starts", f"no: {named(why, names)}")]
    speed, cost = result.get("speed") or {}, result.get("cost") or {}
    bar = f" (± {percent((speed.get('error_bar_pct') or 0) / 100)})"
    lines += [Line("Requests in flight", f"{count(speed.get('concurrency'))} per replica, "
                                         f"{count(speed.get('replicas_per_node'))} replica(s) per node"),
              Line("Output tokens/s per node", f"{count(speed.get('output_tokens_per_s_per_node'))}{bar}"),
              Line("Latency", f"first token {speed.get('ttft_s', 0):.2f} s, then {1000 * speed.get('tpot_s', 0):.0f} "
                              f"ms a token")]
    if cost:
        cbar = f" (± {percent((cost.get('error_bar_pct') or 0) / 100)})"
        lines += [Line("Price per million tokens", f"{rate(cost.get('usd_per_million_output_tokens'))} output, "
                                                   f"{rate(cost.get('usd_per_million_input_tokens'))} input{cbar}"),
                  Line("Yearly capacity of the node", f"{_big(cost.get('yearly_output_tokens'))} output tokens "
                                                      f"at {percent(cost.get('utilisation'))} utilisation"),
                  Line("Serving cost basis", f"{rate(cost.get('node_usd_per_hour'))} per node-hour "
                                             f"({cost.get('basis')})")]
    return lines


def quote_sections(rev: Any, names: dict[str, str]) -> dict[str, Any]:
    """The quote's sections (label, value lines) and notes, with display names only."""
    result, inputs = rev.result or {}, rev.inputs or {}
    fits = bool(result.get("memory", {}).get("fits"))
    cost = result.get("cost") or {}
    offer: list[Line] = []
    if rev.price is not None:
        chosen = names.get(str(rev.chosen_option), rev.chosen_option) if rev.chosen_option else None
        offer = [Line("Quoted price", price(float(rev.price), rev.currency or "USD")),
                 Line("What the price covers", PRICE_COVERS),
                 Line("Servers", count(rev.server_count or 1))]
        if chosen:
            offer.insert(0, Line("Chosen option", str(chosen)))
        offer.append(Line("Valid until", (rev.created_at + timedelta(days=QUOTE_VALID_DAYS)).strftime("%Y-%m-%d")))
    assumptions = [*cost.get("assumptions", []), *result.get("assumptions", [])]
    notes = [*cost.get("flags", []), *result.get("warnings", [])]
    return {
        "model_name": _model_name(inputs, result),
        "offer": offer,
        "job": _job(inputs, result),
        "layout": _layout(inputs, result, names),
        "memory": _memory(result),
        "time_and_cost": _time_and_cost(result, fits),
        "assumptions": [named(a, names) for a in dict.fromkeys(assumptions)],
        "notes": [named(n, names) for n in dict.fromkeys(notes)],
        "suggestions": [named(s.get("summary", ""), names) for s in result.get("suggestions", [])] if not fits else [],
        "serving": serving_lines(getattr(rev, "serving_inputs", None), getattr(rev, "serving_result", None), names),
    }
