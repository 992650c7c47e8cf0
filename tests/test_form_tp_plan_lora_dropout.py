"""The estimate form (fields named by their contract path) carries ``training.lora_dropout`` and
``parallelism.tp_plan``: a select with the two plans and an empty choice (the framework's default), a number
for the dropout; both survive the share-link round trip."""

from __future__ import annotations

from starlette.datastructures import QueryParams

from app.web.forms import field_specs, parse_form, request_to_query


def test_the_form_has_both_fields() -> None:
    specs = {s.name: s for s in field_specs()}
    plan = specs["parallelism.tp_plan"]
    assert plan.kind == "select" and plan.optional and set(plan.choices) == {"vocab-parallel", "replicated-embeddings"}
    assert plan.label == "Tensor-parallel plan" and "Hugging Face" in plan.help
    dropout = specs["training.lora_dropout"]
    assert dropout.kind == "number" and dropout.step == "any" and dropout.default == 0.0
    assert dropout.label == "LoRA dropout"


def test_submitted_values_reach_the_request_and_the_share_link() -> None:
    query = ("model=llama-3.1-8b&training.method=lora&training.lora_dropout=0.05&parallelism.tp=2"
             "&parallelism.tp_plan=replicated-embeddings&hardware.gpu=h200-sxm-141gb&hardware.gpus_per_node=2")
    parsed = parse_form(QueryParams(query))
    assert parsed.request is not None, parsed.errors.messages
    assert parsed.request.training.lora_dropout == 0.05
    assert parsed.request.parallelism.tp_plan == "replicated-embeddings"
    again = parse_form(QueryParams(request_to_query(parsed.request)))
    assert again.request == parsed.request
    empty = parse_form(QueryParams("model=llama-3.1-8b&parallelism.tp_plan="))
    assert empty.request is not None and empty.request.parallelism.tp_plan is None


def test_a_bad_dropout_is_shown_next_to_its_field() -> None:
    parsed = parse_form(QueryParams("model=llama-3.1-8b&training.lora_dropout=1.5"))
    assert parsed.request is None
    assert "less than 1" in parsed.errors.messages["training.lora_dropout"]
