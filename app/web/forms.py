"""The "Size a fine-tune" form: flat query parameters <-> :class:`EstimateRequest`.

Form fields are named by their dotted path in the request contract (``training.seq_len``,
``hardware.gpu``), so a validation error's location names the form field it belongs to, and the query
string of ``GET /estimate`` reproduces the page. The model is chosen by ``model`` (a preset id) unless
``model_json`` holds a pasted Hugging Face ``config.json`` (or a capplan model shape with ``num_layers``).
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin
from urllib.parse import urlencode

from pydantic import BaseModel, ValidationError

from app.core.i18n import N_
from app.core.i18n import gettext as _
from estimator.request import ClusterChoice, EstimateRequest, Hardware, HfConfigModel, ModelArch, Parallelism, Training
from estimator.rules.stacks import NEW_FIELDS as STACK_MECHANISMS
from estimator.rules.stacks import STACK_DEFAULTS
from estimator.tco.run_cost import CostChoice

__all__ = [
    "SECTIONS",
    "FieldSpec",
    "FormErrors",
    "FormInput",
    "parse_form",
    "plain_message",
    "request_to_query",
    "request_to_values",
]

SECTIONS: dict[str, type[BaseModel]] = {
    "training": Training,
    "parallelism": Parallelism,
    "hardware": Hardware,
    "cost": CostChoice,
    "cluster": ClusterChoice,
}

#: Fields shown in the main part of the form; every other contract field goes in "Advanced".
BASIC_FIELDS = frozenset({"training.method", "hardware.gpu", "hardware.server", "hardware.num_nodes"})

LABELS: dict[str, tuple[str, str]] = {
    "training.method": (N_("Training method"), N_("Full fine-tune, LoRA adapters, or LoRA on a 4-bit base model")),
    "training.lora_rank": (N_("LoRA rank"), N_("Rank r of the adapter matrices")),
    "training.lora_targets": (N_("LoRA targets"), N_("Which linear layers get adapters")),
    "training.precision": (N_("Precision"), N_("Number format of weights and compute")),
    "training.optimizer": (N_("Optimizer"), ""),
    "training.optimizer_impl": (N_("Optimizer implementation"), N_("PyTorch fused, foreach or for-loop kernels")),
    "training.micro_batch_size": (N_("Micro-batch size"), N_("Sequences per GPU per forward pass")),
    "training.seq_len": (N_("Sequence length"), N_("Tokens per sequence")),
    "training.gradient_accumulation_steps": (N_("Gradient accumulation steps"), ""),
    "training.activation_checkpointing": (N_("Activation checkpointing"), N_("Recompute activations to save memory")),
    "training.train_tokens": (N_("Tokens to train on"), N_("Total training tokens, e.g. 1e9; empty for none")),
    "training.attention": (N_("Attention kernel"), ""),
    "training.pipeline_schedule": (N_("Pipeline schedule"), N_("Only used when pipeline parallel > 1")),
    "training.virtual_stages": (N_("Virtual pipeline stages"), N_("Interleaved schedule only")),
    "parallelism.sharding": (N_("Sharding"), N_("ZeRO stage / FSDP")),
    "parallelism.tp": (N_("Tensor parallel (TP)"), ""),
    "parallelism.pp": (N_("Pipeline parallel (PP)"), ""),
    "parallelism.cp": (N_("Context parallel (CP)"), ""),
    "parallelism.ep": (N_("Expert parallel (EP)"), N_("Mixture-of-experts models only")),
    "parallelism.sequence_parallel": (N_("Sequence parallel"), N_("Megatron sequence parallelism (with TP)")),
    "parallelism.offload": (N_("CPU offload"), ""),
    "parallelism.framework": (N_("Framework"), ""),
    "parallelism.hsdp_shard_size": (N_("HSDP shard size"), N_("GPUs per shard group; empty for one node")),
    "hardware.gpu": (N_("GPU"), ""),
    "hardware.server": (N_("Server"), N_("Optional: a catalog server fixes the GPU and the host")),
    "hardware.num_nodes": (N_("Nodes"), N_("Number of servers")),
    "hardware.gpus_per_node": (N_("GPUs per node"), ""),
    "training.packed_document_tokens": (N_("Packed document length"), N_("Mean tokens per packed document; empty: "
                                                                         "one document per sequence")),
    "training.lora_dropout": (N_("LoRA dropout"), N_("peft lora_dropout, e.g. 0.05; each adapter then keeps a mask "
                                                     "and its own input copy")),
    "training.lora_kernel": (N_("LoRA kernels"), N_("peft (one adapter per linear) or fused (NeMo AutoModel's triton "
                                                    "LoRA, Megatron); empty: the framework's default; step time only")),
    "training.stack": (N_("Fine-tuning stack"), N_("Its documented defaults fill the fields left empty (TRL: "
                                                   "chunked loss and checkpointing; Unsloth: 4-bit base, fused loss, "
                                                   "offloaded checkpoints)")),
    "training.loss_kernel": (N_("Loss kernel"), N_("materialized (full fp32 logits), chunked (TRL, torchtune) or "
                                                   "fused (Liger, Cut Cross-Entropy, Unsloth); empty: the stack's "
                                                   "default")),
    "training.fused_kernels": (N_("Fused kernels"), N_("liger: Liger RMSNorm, SwiGLU and RoPE; empty: the "
                                                       "stack's default")),
    "training.activation_offloading": (N_("Activation offloading"), N_("checkpoints (Unsloth, axolotl offload) or "
                                                                       "all saved tensors (torchtune, TRL) to host "
                                                                       "memory; empty: the stack's default")),
    "training.allocator": (N_("CUDA caching allocator"), N_("default, or expandable_segments (the PyTorch "
                                                          "allocator setting expandable_segments:True): sets the "
                                                          "reserved peak and the at-risk verdict")),
    "parallelism.tp_plan": (N_("Tensor-parallel plan"), N_("vocab-parallel (Megatron, torchtitan) or "
                                                           "replicated-embeddings (Hugging Face tp_plan=\"auto\", "
                                                           "accelerate, DeepSpeed AutoTP); empty: the framework's "
                                                           "default")),
    "parallelism.tp_comm_overlap": (N_("TP communication overlap"), N_("Megatron --tp-comm-overlap (userbuffers); "
                                                                       "auto: on for Megatron with sequence parallel")),
    "parallelism.first_stage_layers": (N_("Layers on the first pipeline stage"), N_("Empty: the framework's split")),
    "parallelism.last_stage_layers": (N_("Layers on the last pipeline stage"), N_("Empty: the framework's split")),
    "cost.basis": (N_("Cost basis"), N_("auto: a chosen server is owned, no server is rented; own or rent to say")),
    "cost.offer_id": (N_("Cloud offer"), N_("Optional: one catalog cloud offer id to rent (rent)")),
    "cost.provider_class": (N_("Provider class"), N_("Whose cloud offers rent the GPU: hyperscalers or GPU clouds "
                                                     "(neoclouds)")),
    "cost.pricing": (N_("Cloud pricing"), N_("On-demand, reserved (committed term) or spot price of the offer")),
    "cost.utilisation": (N_("Utilisation"), N_("Owned: share of hours doing useful work, 0.01 to 1; empty: the TCO "
                                               "default")),
    "cost.electricity_usd_per_kwh": (N_("Electricity ($/kWh)"), N_("Owned: price of power; empty: the TCO "
                                                                  "default")),
    "cost.pue": (N_("PUE"), N_("Owned: data-centre power usage effectiveness, 1 to 3; empty: the TCO default")),
    "cost.networking_usd_per_node_ib_ndr": (N_("InfiniBand network ($ a node)"), N_(
        "Owned, several nodes: your own figure in place of the designed fabric's cost; empty: the designed fabric")),
    "cost.networking_usd_per_node_roce": (N_("RoCE network ($ a node)"), N_(
        "Owned, several nodes on a RoCE fabric: your own figure in place of the designed fabric's cost; empty: the "
        "designed fabric")),
    "cluster.fabric": (N_("Compute fabric"), N_("More than one node: InfiniBand NDR or XDR, or Spectrum-X RoCE; empty: "
                                                "NDR on 400G NICs, XDR on 800G (as on /cluster)")),
    "cluster.oversubscription": (N_("Fabric oversubscription"), N_("Leaf downlinks per uplink; 1 = non-blocking")),
}

#: Fields a stack's defaults may fill (estimator.rules.stacks.STACK_DEFAULTS): a link that leaves one out gets the
#: stack's value, not the form's default.
STACK_SET_FIELDS = frozenset("training." + d.field for defaults in STACK_DEFAULTS.values() for d in defaults)

#: The cost section of the form (``cost.*`` of the estimate request): sent only when a field differs from its
#: default, so that an untouched form is the API's ``cost: null``.
COST_SECTION = "cost"
#: The sections sent only when a field differs from its default (an untouched form is the API's ``null``), and the
#: model whose defaults stand for a ``null`` section: the cost and the cluster's fabric (issue 32)
OPTIONAL_SECTIONS: dict[str, type[BaseModel]] = {COST_SECTION: CostChoice, "cluster": ClusterChoice}


@dataclass(frozen=True)
class FieldSpec:
    """One form control for a contract field."""

    name: str  # dotted path, also the form field name
    kind: Literal["select", "number", "checkbox", "text"]
    default: Any
    choices: tuple[str, ...] = ()
    optional: bool = False
    step: str = "1"
    minimum: float | None = None

    @property
    def label(self) -> str:
        return LABELS.get(self.name, (self.name.split(".")[-1].replace("_", " ").capitalize(), ""))[0]

    @property
    def help(self) -> str:
        return LABELS.get(self.name, ("", ""))[1]

    @property
    def dom_id(self) -> str:
        return "f-" + self.name.replace(".", "-").replace("_", "-")


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0], len(args) < len(get_args(annotation))
    return annotation, False


def _lower_bound(metadata: list[Any]) -> float | None:
    for item in metadata:
        for attr in ("ge", "gt"):
            if getattr(item, attr, None) is not None:
                return float(getattr(item, attr))
    return None


def _field_spec(section: str, name: str, info: Any) -> FieldSpec:
    annotation, optional = _unwrap_optional(info.annotation)
    dotted = f"{section}.{name}"
    if get_origin(annotation) is Literal:
        return FieldSpec(dotted, "select", info.default, tuple(get_args(annotation)), optional)
    if annotation is bool:
        return FieldSpec(dotted, "checkbox", info.default)
    if annotation in (int, float):
        step = "1" if annotation is int else "any"
        return FieldSpec(dotted, "number", info.default, (), optional, step, _lower_bound(info.metadata))
    return FieldSpec(dotted, "text", info.default, (), optional)


#: contract fields the form leaves to the API: a checkbox whose default is on cannot tell "unchecked" from "left out"
API_ONLY_FIELDS = frozenset({"cluster.ufm"})


def field_specs() -> list[FieldSpec]:
    """Every field of the training, parallelism and hardware sections, in contract order."""
    return [
        _field_spec(section, name, info)
        for section, model in SECTIONS.items()
        for name, info in model.model_fields.items()
        if f"{section}.{name}" not in API_ONLY_FIELDS
    ]


@dataclass
class FormErrors:
    """Messages keyed by form field name (``"form"`` for errors that belong to no field)."""

    messages: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, message: str) -> None:
        self.messages.setdefault(name, message)

    def __bool__(self) -> bool:
        return bool(self.messages)


@dataclass
class FormInput:
    """The parsed form: the values to show again, and the request when it validated."""

    values: dict[str, Any]
    request: EstimateRequest | None
    errors: FormErrors


def _get(params: Mapping[str, Any], name: str) -> str:
    getlist = getattr(params, "getlist", None)
    if getlist is not None:
        items = getlist(name)
        return str(items[-1]).strip() if items else ""
    value = params.get(name, "")
    return str(value).strip() if value is not None else ""


def _coerce(spec: FieldSpec, raw: str, present: bool) -> Any:
    """Absent or empty means the contract default (``None`` for optional fields); a checkbox that is
    absent is unchecked."""
    if spec.kind == "checkbox":
        return raw.lower() in ("1", "true", "on", "yes") if present else False
    if raw == "":
        return None if spec.optional else spec.default
    if spec.name in COUNT_FIELDS:
        return _count(raw)
    return raw


#: token counts typed as people write them: "1B", "1.5T", "1,000,000,000" (pt-BR "1.000.000.000"), "1e9"
COUNT_FIELDS = frozenset({"training.train_tokens"})


def _count(raw: str) -> str:
    """The count as digits when it reads as one in the page's locale (app.formatting.parse_count); else as typed,
    for the contract's own message."""
    from app.core.i18n import current
    from app.formatting import parse_count

    locale = current()
    try:
        return str(parse_count(raw, "en_US" if locale == "en" else locale))
    except ValueError:
        return raw


def _model_input(values: dict[str, Any], errors: FormErrors) -> Any:
    text = values.get("model_json", "")
    if not text:
        return values.get("model") or EstimateRequest.model_fields["model"].default
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        errors.add("model_json", _("Not valid JSON: %(msg)s (line %(line)s, column %(col)s)") % {
            "msg": exc.msg, "line": exc.lineno, "col": exc.colno})
        return None
    if not isinstance(data, dict):
        errors.add("model_json", _("Paste a JSON object, such as the contents of a config.json"))
        return None
    if "num_layers" in data and "num_hidden_layers" not in data:
        return {"kind": "arch", "data": data}
    return {"kind": "hf", "data": data}


def _build_model(raw: Any) -> str | HfConfigModel | ModelArch:
    if isinstance(raw, dict):
        if raw["kind"] == "arch":
            return ModelArch(**raw["data"])
        return HfConfigModel(hf_config=raw["data"])
    return str(raw)


def _error_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if not parts:
        return "form"
    if parts[0] not in SECTIONS:
        return "model"
    return ".".join(parts[:2])


_PLAIN: dict[str, str] = {
    "int_parsing": N_("Enter a whole number"),
    "int_from_float": N_("Enter a whole number"),
    "float_parsing": N_("Enter a number, such as 1e9"),
    "bool_parsing": N_("Enter true or false"),
    "greater_than_equal": N_("Must be at least {ge}"),
    "greater_than": N_("Must be more than {gt}"),
    "less_than_equal": N_("Must be at most {le}"),
    "less_than": N_("Must be less than {lt}"),
    "literal_error": N_("Choose one of {expected}"),
    "missing": N_("Required"),
    "extra_forbidden": N_("Unknown field"),
}


def plain_message(err: Mapping[str, Any]) -> str:
    """Pydantic's message in plain words where we have them."""
    template = _PLAIN.get(str(err.get("type")))
    if template is not None:
        try:
            return _(template).format(**err.get("ctx", {}))
        except (KeyError, IndexError):
            pass
    return str(err.get("msg", "invalid value")).removeprefix("Value error, ")


def parse_form(params: Mapping[str, Any]) -> FormInput:
    """Turn submitted form fields into an :class:`EstimateRequest`, or into messages per field."""
    errors = FormErrors()
    specs = field_specs()
    values: dict[str, Any] = {
        "model": _get(params, "model") or EstimateRequest.model_fields["model"].default,
        "model_json": _get(params, "model_json"),
    }
    absent: set[str] = set()
    for spec in specs:
        present = spec.name in params
        if not present:
            absent.add(spec.name)
        values[spec.name] = _coerce(spec, _get(params, spec.name), present)
    model_raw = _model_input(values, errors)
    if errors:
        return FormInput(values, None, errors)
    sections: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for spec in specs:
        value = values[spec.name]
        if spec.name in absent and spec.name in STACK_SET_FIELDS:
            continue  # left out of a link: the stack's default (training.stack) fills it
        section, name = spec.name.split(".", 1)
        if value is not None and not (section in OPTIONAL_SECTIONS and value == spec.default):
            sections[section][name] = value
    for section in OPTIONAL_SECTIONS:
        if not sections[section]:
            del sections[section]
    request = _validate(model_raw, sections, errors)
    if request is not None:
        values = {**request_to_values(request), "model": values["model"], "model_json": values["model_json"]}
    return FormInput(values, request, errors)


def _validate(model_raw: Any, sections: dict[str, dict[str, Any]], errors: FormErrors) -> EstimateRequest | None:
    try:
        model = _build_model(model_raw)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()))
            errors.add("model_json", f"{where}: {plain_message(err)}" if where else plain_message(err))
        return None
    try:
        return EstimateRequest(model=model, **sections)
    except ValidationError as exc:
        for err in exc.errors():
            errors.add(_error_name(tuple(err.get("loc", ()))), plain_message(err))
        return None


def request_to_values(request: EstimateRequest) -> dict[str, Any]:
    """Form values that reproduce ``request`` (for re-opening a saved quote)."""
    values: dict[str, Any] = {"model": EstimateRequest.model_fields["model"].default, "model_json": ""}
    if isinstance(request.model, str):
        values["model"] = request.model
    elif isinstance(request.model, HfConfigModel):
        values["model_json"] = json.dumps(request.model.hf_config, indent=2)
    else:
        arch = request.model.model_dump(exclude_defaults=True)
        values["model_json"] = json.dumps(arch, indent=2)
    for spec in field_specs():
        section, name = spec.name.split(".", 1)
        part = getattr(request, section)
        values[spec.name] = getattr(OPTIONAL_SECTIONS[section]() if part is None else part, name)
    for d in STACK_DEFAULTS[request.training.stack]:  # a mechanism at its stack's default shows as "the default"
        if d.field in STACK_MECHANISMS and values["training." + d.field] == d.value:
            values["training." + d.field] = None
    return values


def request_to_query(request: EstimateRequest) -> str:
    """The shortest query string that reproduces ``request``: defaults are left out."""
    values = request_to_values(request)
    pairs: list[tuple[str, str]] = [("model", values["model"])] if not values["model_json"] else []
    if values["model_json"]:
        pairs.append(("model_json", json.dumps(json.loads(values["model_json"]), separators=(",", ":"))))
    stack_defaults = {"training." + d.field: d.value for d in STACK_DEFAULTS[request.training.stack]}
    for spec in field_specs():
        value = values[spec.name]
        if spec.name in STACK_SET_FIELDS:  # left out, the stack's default (or the contract's) comes back
            if value is None or value == stack_defaults.get(spec.name, spec.default):
                continue
        elif value == spec.default or value is None:
            continue
        pairs.append((spec.name, _query_value(value)))
    return urlencode(pairs)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)

