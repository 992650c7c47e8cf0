"""The customer-ready quote: one saved revision in words a customer reads (display names, never catalog ids),
as printable HTML and as a PDF (WeasyPrint, on Debian's Pango).

What it says: the job (model, method, tokens, sequence length, batch), the layout (nodes x GPUs, parallelism),
per-GPU memory and whether it fits (with its error bar), time to train (with its error bar), GPU-hours,
energy, the cost basis and total, the quoted price, the date it is valid until, and the assumptions; with a
serving line, the engine, workload, tokens/s, latency, price per million tokens and the node's yearly capacity.
Money, counts and percentages come from :mod:`app.formatting` (Babel), as on the pages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from app.core.i18n import N_, localize_number, translate
from app.core.i18n import current as current_locale
from app.core.i18n import gettext as _
from estimator import EstimatorError

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["QUOTE_VALID_DAYS", "Line", "display_names", "fabric_lines", "quote_sections", "serving_lines"]

#: what a quoted price is, said next to it (the cost to train below is the estimate, not the offer)
PRICE_COVERS = N_("the price offered for the option named here, as agreed with the seller; the cost to train "
                  "below is capplan's estimate of running this job, for comparison, and not part of the offer")
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
    """The pages' own GiB (app.web.templating.gib), in the document's locale."""
    from app.web.templating import gib

    return gib(value) if isinstance(value, int | float) else "n/a"


def _num(value: Any) -> str:
    from app.web.templating import num

    return num(value) if isinstance(value, int | float) else "n/a"


def _pct(value: float) -> str:
    from app.web.templating import pct

    return str(pct(value, 0))


def _money(value: float) -> str:
    from app.web.templating import money

    return money(value)


def _rate(value: Any) -> str:
    from app.web.templating import rate as page_rate

    return page_rate(value) if isinstance(value, int | float) else "n/a"


def _price(value: float, currency: str) -> str:
    """A quoted price to the cent in its own currency, in the document's locale (Babel)."""
    from app.formatting import rate as fmt_rate

    locale = current_locale()
    return fmt_rate(value, currency) if locale == "en" else fmt_rate(value, currency, locale=locale)


def _date(value: Any) -> str:
    """A date as ``2027-01-05`` in English, in the locale's medium form elsewhere (Babel)."""
    from datetime import date, datetime

    from babel.dates import format_date

    if isinstance(value, datetime):
        day = value.date()
    elif isinstance(value, date):
        day = value
    else:  # a catalog date may be partial ("2024-06", "2024"): shown as written
        try:
            day = date.fromisoformat(str(value))
        except ValueError:
            return str(value)
    return day.isoformat() if current_locale() == "en" else str(format_date(day, format="medium",
                                                                             locale=current_locale()))


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
    return str(model.get("name") or inputs.get("model") or _("custom model"))


def _job(inputs: dict[str, Any], result: dict[str, Any]) -> list[Line]:
    t = inputs.get("training", {})
    model = result.get("model", {})
    method = {"full": _("full fine-tune"), "lora": "LoRA", "qlora": "QLoRA"}.get(str(t.get("method")),
                                                                                _("fine-tune"))
    lines = [Line(_("Model"), _("%(model)s (%(n)s parameters)") % {"model": _model_name(inputs, result),
                                                                  "n": _num(model.get("total_params"))}),
             Line(_("Method"), f"{method}, {t.get('precision', 'bf16-mixed')}, {t.get('optimizer', 'adamw')}")]
    if t.get("train_tokens"):
        lines.append(Line(_("Tokens to train on"), _num(t.get("train_tokens"))))
    lines.append(Line(_("Sequence length"), _("%(n)s tokens") % {"n": _num(t.get("seq_len"))}))
    lines.append(Line(_("Batch"), _("micro-batch %(mbs)s per GPU, gradient accumulation %(gas)s") % {
        "mbs": _num(t.get("micro_batch_size")), "gas": _num(t.get("gradient_accumulation_steps"))}))
    return lines


def _layout(inputs: dict[str, Any], result: dict[str, Any], names: dict[str, str]) -> list[Line]:
    lay = result.get("layout", {})
    hardware = names.get(str(lay.get("server")), "") if lay.get("server") else ""
    gpu = names.get(str(lay.get("gpu")), _("the chosen GPU"))
    gpus = int(lay.get("world_size") or 0)
    per_node = result.get("host") or {}
    nodes = int((inputs.get("hardware") or {}).get("num_nodes") or 1)
    where = f"{_num(nodes)} x {hardware}: {gpus} x {gpu}" if hardware else f"{gpus} x {gpu}"
    parts = [_("data parallel %(n)s") % {"n": lay.get("dp")}] + [
        f"{k} {lay.get(v)}" for k, v in ((_("tensor parallel"), "tp"), (_("pipeline parallel"), "pp"),
                                         (_("context parallel"), "cp"), (_("expert parallel"), "ep"))
        if (lay.get(v) or 1) > 1]
    p = inputs.get("parallelism") or {}
    offload = str(p.get("offload") or "none")
    extra = "; " + _("%(what)s offloaded to CPU memory") % {"what": offload} if offload != "none" else ""
    framework = f" ({p.get('framework')})" if p.get("framework") else ""
    lines = [Line(_("Hardware"), where),
             Line(_("Parallelism"), ", ".join(parts) + "; " + _("sharding %(s)s") % {"s": lay.get("sharding")}
                  + framework + extra)]
    if per_node.get("recommended_ram_gib"):
        lines.append(Line(_("Host RAM per node"), _("%(n)s GiB recommended") % {
            "n": _num(per_node["recommended_ram_gib"])}))
    return lines


def _memory(result: dict[str, Any]) -> list[Line]:
    m = result.get("memory", {})
    bar = f" (± {_pct((m.get('error_bar_pct') or 0) / 100)})" if m.get("error_bar_pct") is not None else ""
    return [Line(_("Per-GPU memory"), _("%(used)s%(bar)s of %(capacity)s") % {
                "used": _gib(m.get("total_bytes")), "bar": bar, "capacity": _gib(m.get("capacity_bytes"))}),
            Line(_("Fits"), _("yes") if m.get("fits") else _("no: this setup does not run; see the suggestions")),
            Line(_("Headroom"), _gib(m.get("headroom_bytes")))]


def _time_and_cost(result: dict[str, Any], fits: bool) -> list[Line]:
    if not fits:
        return [Line(_("Time and cost"), _("not given: the setup does not fit in GPU memory"))]
    time, train, cost = result.get("time") or {}, result.get("train") or {}, result.get("cost") or {}
    bar = (time.get("error_bar_pct") or 0) / 100
    lines = []
    if train:
        seconds = train.get("time_to_train_s")
        lines += [Line(_("Time to train"), _("%(t)s (± %(bar)s: %(low)s to %(high)s)") % {
                      "t": _duration(seconds), "bar": _pct(bar), "low": _duration(seconds * (1 - bar)),
                      "high": _duration(seconds * (1 + bar))}),
                  Line(_("GPU-hours"), _num(train.get("gpu_hours"))),
                  Line(_("Energy (IT, at the servers)"), f"{_num(train.get('energy_kwh'))} kWh")]
    if cost:
        what = cost.get("label") if cost.get("basis") == "own" else _("rented: %(what)s") % {"what": cost.get("label")}
        dated = (_("price of %(date)s") % {"date": _date(cost["date"])} if cost.get("date")
                 else _("price estimated, no catalog date"))
        confidence = {"high": _("high"), "medium": _("medium"), "low": _("low")}.get(str(cost.get("confidence")),
                                                                                    str(cost.get("confidence")))
        lines.append(Line(_("Cost basis"), _("%(what)s at %(rate)s per GPU-hour (%(confidence)s confidence, "
                                             "%(dated)s)") % {"what": what, "rate": _rate(cost.get("usd_per_gpu_hour")),
                                                              "confidence": confidence, "dated": dated}))
        total = cost.get("total_usd")
        if total is not None:
            lines.append(Line(_("Cost to train"), _("%(t)s (± %(bar)s: %(low)s to %(high)s)") % {
                "t": _money(total), "bar": _pct(bar), "low": _money(total * (1 - bar)),
                "high": _money(total * (1 + bar))}))
    else:
        lines.append(Line(_("Cost basis"), _("no price in the catalog for this hardware")))
    return lines


#: the serving line's cost basis, as the pages say it
_SERVING_BASIS = {"own": N_("owned"), "cloud": N_("rented")}


def _big(value: Any) -> str:
    """A yearly token count in words a customer reads ("3.1 trillion", "850 billion"; "1,1 trilhão", "850 bilhões"
    in pt-BR: the number in the document's locale, the word in its plural form)."""
    if not isinstance(value, int | float):
        return "n/a"
    from app.core.i18n import ngettext
    from app.web.templating import num

    if value >= 1e12:
        return ngettext("%(n)s trillion", "%(n)s trillion", int(value / 1e12)) % {"n": num(value / 1e12, 1)}
    if value >= 1e9:
        return ngettext("%(n)s billion", "%(n)s billion", int(value / 1e9)) % {"n": num(value / 1e9, 1)}
    if value >= 1e6:
        return ngettext("%(n)s million", "%(n)s million", int(value / 1e6)) % {"n": num(value / 1e6, 1)}
    return _num(value)


def _money3(value: Any) -> str:
    """A price per million tokens to a tenth of a cent, as the Serve page and the saved quote's serving card write
    it (app.web.templating.money3: the reader's locale and currency)."""
    from app.web.templating import money3

    return money3(value) if isinstance(value, int | float) else "n/a"


def serving_lines(inputs: dict[str, Any] | None, result: dict[str, Any] | None,
                  names: dict[str, str]) -> list[Line]:
    """The quote's serving line (an inference estimate stored with it): engine and layout, the workload, speed,
    price per million tokens and the node's yearly capacity, each with its error bar; ``[]`` when it has none.
    Every label and sentence goes through the catalog (``?lang=pt_BR`` gives them in Portuguese) and every number
    through the pages' own formatters (Babel, the document's locale and currency)."""
    if not inputs or not result:
        return []
    s, w = inputs.get("serving") or {}, inputs.get("workload") or {}
    gpu = names.get(str(result.get("gpu")), str(result.get("gpu")))
    server = names.get(str(result.get("server")), "") if result.get("server") else ""
    engine = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}.get(str(result.get("engine")),
                                                                                      str(result.get("engine")))
    tp, pp = s.get("tensor_parallel_size", 1), s.get("pipeline_parallel_size", 1)
    pipeline = _(" x pipeline parallel %(pp)s") % {"pp": pp} if pp > 1 else ""
    lines = [Line(_("Engine"), _("%(engine)s, %(where)s%(gpu)s, tensor parallel %(tp)s%(pipeline)s, weights "
                                 "%(weights)s, KV cache %(kv)s") % {
                 "engine": engine, "where": f"{server}: " if server else "", "gpu": gpu, "tp": tp,
                 "pipeline": pipeline, "weights": s.get("weights", "bf16"), "kv": s.get("kv_cache_dtype", "auto")}),
             Line(_("Workload"), _("%(input)s input + %(output)s output tokens a request, context up to "
                                   "%(context)s") % {"input": _num(w.get("input_tokens")),
                                                     "output": _num(w.get("output_tokens")),
                                                     "context": _num(s.get("max_model_len"))})]
    if not result.get("starts"):
        why = "; ".join(translate(str(e)) for e in result.get("errors", [])) or _("it does not fit")
        # the engine's own start-up error, quoted as the engine prints it (vLLM and PyTorch write English)
        return [*lines, Line(_("Starts"), _("no; the engine stops with: %(why)s") % {"why": named(why, names)})]
    from app.web.templating import num

    speed, cost = result.get("speed") or {}, result.get("cost") or {}
    bar = f" (± {_pct((speed.get('error_bar_pct') or 0) / 100)})"
    lines += [Line(_("Requests in flight"), _("%(n)s per replica, %(replicas)s replica(s) per node") % {
                  "n": _num(speed.get("concurrency")), "replicas": _num(speed.get("replicas_per_node"))}),
              Line(_("Output tokens/s per node"), f"{_num(speed.get('output_tokens_per_s_per_node'))}{bar}"),
              Line(_("Latency"), _("first token %(ttft)s s, then %(tpot)s ms a token") % {
                  "ttft": num(speed.get("ttft_s", 0), 2), "tpot": num(1000 * speed.get("tpot_s", 0), 0)})]
    if cost:
        cbar = f" (± {_pct((cost.get('error_bar_pct') or 0) / 100)})"
        basis = str(cost.get("basis"))
        lines += [Line(_("Price per million tokens"), _("%(output)s output, %(input)s input") % {
                      "output": _money3(cost.get("usd_per_million_output_tokens")),
                      "input": _money3(cost.get("usd_per_million_input_tokens"))} + cbar),
                  Line(_("Yearly capacity of the node"), _("%(tokens)s output tokens at %(pct)s utilisation") % {
                      "tokens": _big(cost.get("yearly_output_tokens")), "pct": _pct(cost.get("utilisation") or 0)}),
                  Line(_("Serving cost basis"), _("%(rate)s per node-hour (%(basis)s)") % {
                      "rate": _rate(cost.get("node_usd_per_hour")),
                      "basis": _(_SERVING_BASIS[basis]) if basis in _SERVING_BASIS else basis})]
    return lines


def power_and_rack(inputs: dict[str, Any], result: dict[str, Any], catalog: Catalog | None) -> list[Line]:
    """Peak / at load / average power per node and nodes per rack, from the functions the pages use
    (app.services.power), with the same labels as the estimate's node panel and /tco."""
    hw = inputs.get("hardware") or {}
    server = hw.get("server")
    if catalog is None or not server or server not in getattr(catalog, "servers", {}):
        host = result.get("host") or {}
        peak = host.get("power_w_per_node")
        return [Line(_("Power per node"), f"{_num(peak / 1000)} kW " + _("peak"))] if peak else []
    from app.services.power import default_rack_kw, node_power, rack_fit
    from estimator.tco import TcoAssumptions

    util = (inputs.get("cost") or {}).get("utilisation")
    a = TcoAssumptions(utilisation=util) if util is not None else TcoAssumptions()
    budget = float(((inputs.get("host") or {}).get("rack_kw_budget")) or default_rack_kw())
    try:
        power = node_power(catalog, server, a)
        rack = rack_fit(catalog, server, budget)
    except (EstimatorError, AttributeError, KeyError):  # a catalog without the server's power facts
        host = result.get("host") or {}
        peak = host.get("power_w_per_node")
        return [Line(_("Power per node"), f"{_num(peak / 1000)} kW " + _("peak"))] if peak else []
    return [Line(_("Power per node"), "; ".join([
                f"{_one(power.peak_kw)} kW " + _("peak"), f"{_one(power.at_load_kw)} kW " + _("at load"),
                f"{_one(power.average_kw)} kW " + _("average at %(pct)s utilisation") % {"pct": _pct(a.utilisation)}])),
            Line(_("Per %(kw)s kW rack") % {"kw": localize_number(f"{budget:g}")},
                 _("%(n)s nodes (limited by %(what)s)") % {"n": rack.nodes_per_rack, "what": _(rack.limited_by)})]


def _one(value: float) -> str:
    from app.web.templating import num

    return num(value, 1)


def bill_of_materials(result: dict[str, Any], names: dict[str, str]) -> tuple[list[Line], str | None]:
    """The estimate's bill of materials, each line priced where the catalog has a price, and the priced total."""
    lines, total, priced = [], 0.0, 0
    for b in result.get("bill_of_materials") or []:
        qty = int(b.get("quantity") or 1)
        unit = b.get("unit_price_usd")
        if unit is not None:
            total += float(unit) * qty
            priced += 1
            value = _("%(qty)s x %(unit)s = %(total)s") % {"qty": qty, "unit": _money(float(unit)),
                                                             "total": _money(float(unit) * qty)}
        else:
            value = _("%(qty)s, no catalog price") % {"qty": qty}
        lines.append(Line(named(b.get("item", ""), names), value))
    return lines, (_money(total) if priced else None)


def fabric_lines(result: dict[str, Any]) -> list[Line]:
    """The compute fabric of a multi-node quote (the stored ``result.fabric``, designed by
    ``estimator.cluster.design_cluster`` as /cluster is): switches, cables, optics, power, racks, cost and the TCO
    with this fabric; ``[]`` for a quote without one (one node, or saved before quotes carried the fabric)."""
    f = result.get("fabric")
    if not isinstance(f, dict) or not isinstance(f.get("design"), dict):
        return []
    d, power, rack, cost = f["design"], f.get("power") or {}, f.get("rack") or {}, f.get("cost") or {}
    nodes = (f.get("request") or {}).get("num_nodes")
    lines = [Line(_("Compute fabric"), _("%(name)s, %(tiers)s tiers: %(leaves)s leaf, %(spines)s spine and %(cores)s "
                                         "core switches for %(nodes)s nodes (%(gpus)s GPUs)") % {
                      "name": d.get("fabric_name"), "tiers": d.get("tiers"), "leaves": _num(d.get("leaves")),
                      "spines": _num(d.get("spines")), "cores": _num(d.get("cores")), "nodes": _num(nodes),
                      "gpus": _num(d.get("gpus"))}),
             Line(_("Cables and transceivers"), _("%(node)s node and UFM cables, %(up)s leaf-spine cables; %(sw)s "
                                                  "switch-side and %(nd)s node-side transceivers") % {
                      "node": _num(d.get("node_and_ufm_cables")), "up": _num(d.get("leaf_spine_links")),
                      "sw": _num(d.get("switch_transceivers")), "nd": _num(d.get("node_transceivers"))})]
    if isinstance(power.get("fabric_w"), int | float):
        lines.append(Line(_("Fabric power (switches + optics)"), f"{_one(power['fabric_w'] / 1000)} kW"))
    if rack:
        lines.append(Line(_("Racks (compute / network)"), _("%(c)s / %(n)s (%(u)s U of switches)") % {
            "c": _num(rack.get("compute_racks")), "n": _num(rack.get("network_racks")),
            "u": _num(rack.get("switch_rack_units"))}))
    if isinstance(cost.get("fabric_usd"), int | float):
        lines.append(Line(_("Fabric cost"), _("%(usd)s (%(gpu)s per GPU)") % {
            "usd": _money(cost["fabric_usd"]), "gpu": _money(cost.get("fabric_usd_per_gpu") or 0.0)}))
        if cost.get("unpriced_parts"):
            lines.append(Line(_("No catalog price (left out of the totals)"), ", ".join(cost["unpriced_parts"])))
    if isinstance(cost.get("total_usd"), int | float):
        lines.append(Line(_("Servers + fabric"), _money(cost["total_usd"])))
    tco = f.get("tco")
    if isinstance(tco, dict) and isinstance(tco.get("total_usd"), int | float):
        lines.append(Line(_("TCO with this fabric (%(n)s years)") % {"n": tco.get("years")},
                          _("%(total)s: capex %(capex)s; the fabric's power %(power)s a year") % {
                              "total": _money(tco["total_usd"]), "capex": _money(tco.get("capex_usd") or 0.0),
                              "power": _money(tco.get("fabric_power_usd_per_year") or 0.0)}))
    else:
        lines.append(Line(_("TCO"), _("none: the server has no catalog price")))
    lines += [Line(_("Note"), translate(n)) for n in f.get("notes") or []]
    return lines


def quote_sections(rev: Any, names: dict[str, str], catalog: Catalog | None = None) -> dict[str, Any]:
    """The quote's sections (label, value lines) and notes, with display names only."""
    result, inputs = rev.result or {}, rev.inputs or {}
    fits = bool(result.get("memory", {}).get("fits"))
    cost = result.get("cost") or {}
    offer: list[Line] = []
    if rev.price is not None:
        chosen = names.get(str(rev.chosen_option), rev.chosen_option) if rev.chosen_option else None
        offer = [Line(_("Quoted price"), _price(float(rev.price), rev.currency or "USD")),
                 Line(_("What the price covers"), _(PRICE_COVERS)),
                 Line(_("Servers"), _num(rev.server_count or 1))]
        if chosen:
            offer.insert(0, Line(_("Chosen option"), str(chosen)))
        offer.append(Line(_("Valid until"), _date(rev.created_at + timedelta(days=QUOTE_VALID_DAYS))))
    assumptions = [*cost.get("assumptions", []), *result.get("assumptions", [])]
    notes = [*cost.get("flags", []), *result.get("warnings", [])]
    return {
        "model_name": _model_name(inputs, result),
        "offer": offer,
        "job": _job(inputs, result),
        "layout": _layout(inputs, result, names),
        "memory": _memory(result),
        "time_and_cost": _time_and_cost(result, fits),
        "assumptions": [named(translate(a), names) for a in dict.fromkeys(assumptions)],
        "notes": [named(translate(n), names) for n in dict.fromkeys(notes)],
        "suggestions": [named(translate(s.get("summary", "")), names) for s in result.get("suggestions", [])]
        if not fits else [],
        "serving": serving_lines(getattr(rev, "serving_inputs", None), getattr(rev, "serving_result", None), names),
        "power": power_and_rack(inputs, result, catalog),
        "fabric": fabric_lines(result),
        "bom": bill_of_materials(result, names)[0],
        "bom_total": bill_of_materials(result, names)[1],
    }
