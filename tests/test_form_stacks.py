"""The estimate form carries issue 29's fields in its advanced section: the stack (a select, no empty choice) and
the three mechanisms (selects whose empty choice is the stack's default); a link that leaves a stack-set field
out gets the stack's value, and the share link round-trips."""

from __future__ import annotations

from starlette.datastructures import QueryParams

from app.web.forms import BASIC_FIELDS, field_specs, parse_form, request_to_query


def test_the_form_has_the_fields() -> None:
    specs = {s.name: s for s in field_specs()}
    stack = specs["training.stack"]
    assert stack.kind == "select" and not stack.optional and stack.default == "transformers"
    assert "unsloth" in stack.choices
    for name in ("training.loss_kernel", "training.fused_kernels", "training.activation_offloading"):
        assert specs[name].kind == "select" and specs[name].optional and "stack's default" in specs[name].help
        assert name not in BASIC_FIELDS
    assert "muon" in specs["training.optimizer"].choices


def test_a_stack_fills_what_the_link_leaves_out() -> None:
    parsed = parse_form(QueryParams("model=llama-3.1-8b&training.method=lora&training.stack=trl"
                                    "&training.loss_kernel="))
    assert parsed.request is not None, parsed.errors.messages
    t = parsed.request.training
    assert (t.loss_kernel, t.activation_checkpointing) == ("chunked", "full")
    again = parse_form(QueryParams(request_to_query(parsed.request)))
    assert again.request == parsed.request
    chosen = parse_form(QueryParams("model=llama-3.1-8b&training.stack=trl&training.activation_checkpointing=none"))
    assert chosen.request is not None and chosen.request.training.activation_checkpointing == "none"
    plain = parse_form(QueryParams("model=llama-3.1-8b"))
    assert plain.request is not None and plain.request.training.activation_checkpointing == "none"


def test_a_refused_combination_is_shown_next_to_its_field() -> None:
    parsed = parse_form(QueryParams("model=llama-3.1-8b&training.activation_offloading=checkpoints"))
    assert parsed.request is None
    assert "activation_checkpointing" in parsed.errors.messages["training.activation_offloading"]


def test_the_share_link_is_short_and_keeps_what_differs_from_the_stack() -> None:
    plain = parse_form(QueryParams("model=llama-3.1-8b&training.method=lora"))
    assert plain.request is not None
    assert request_to_query(plain.request) == "model=llama-3.1-8b&training.method=lora"
    # TRL turns checkpointing on; a request that turns it off must say so in its link
    off = parse_form(QueryParams("model=llama-3.1-8b&training.stack=trl&training.activation_checkpointing=none"))
    assert off.request is not None
    query = request_to_query(off.request)
    assert "training.activation_checkpointing=none" in query and "loss_kernel" not in query
    again = parse_form(QueryParams(query))
    assert again.request == off.request
