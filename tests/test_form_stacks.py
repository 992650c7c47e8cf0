"""The estimate form carries issue 29's fields in its advanced section: the stack (a select, no empty choice) and
the three mechanisms (selects whose empty choice is the stack's default); a link that leaves a stack-set field
out gets the stack's value, and the share link round-trips."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from fastapi.testclient import TestClient
from starlette.datastructures import QueryParams

from app.core.settings import Settings
from app.main import create_app
from app.web.forms import BASIC_FIELDS, field_specs, parse_form, request_to_query


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("stacks") / "stacks.db"
    settings = Settings(database_url=f"sqlite:///{db}", rate_limit_anonymous="100000/minute",
                        rate_limit_web_writes="100000/minute", rate_limit_web_pages="100000/minute")
    with TestClient(create_app(settings)) as client:
        yield client


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


def test_a_refused_combination_is_shown_next_to_its_field(client: TestClient) -> None:
    """Checked with the layout (the planner never proposes it), shown next to the form field it names."""
    page = client.get("/estimate?model=llama-3.2-1b&training.activation_offloading=checkpoints")
    assert page.status_code in (200, 422)
    error = re.search(r'id="err-f-training-activation-offloading"[^>]*>([^<]*)<', page.text)
    assert error is not None and "activation_checkpointing" in unescape(error.group(1))
