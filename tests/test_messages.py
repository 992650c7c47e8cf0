"""The response contract's message fields (``estimator.messages.Message``): a ``Text`` stays a ``Text`` in Python
(so a page can translate it), JSON and the schemas see a string, and anything else is validated, and refused,
as a ``str`` is."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from estimator import EstimateRequest, estimate
from estimator.messages import Num, Text
from estimator.response import EstimateResponse, Suggestion


def test_an_estimate_keeps_its_messages_as_texts_and_its_json_gives_strings() -> None:
    resp = estimate(EstimateRequest.model_validate({"model": "llama-3.1-70b", "hardware": {"num_nodes": 2}}))
    assert resp.host is not None and resp.host.notes and resp.assumptions
    assert all(type(m) is Text for m in [*resp.assumptions, *resp.host.notes])
    again = EstimateResponse.model_validate_json(resp.model_dump_json())
    assert again.assumptions == resp.assumptions and all(type(m) is str for m in again.assumptions)


def test_a_plain_string_is_a_string_and_a_text_is_itself() -> None:
    text = Text("%(gib)s GiB", gib=Num(1.5, ".1f"))
    kept = Suggestion(summary=text, changes={}, total_bytes=0, fits=True)
    plain = Suggestion(summary="plain", changes={}, total_bytes=0, fits=True)
    assert kept.summary is text and kept.model_dump()["summary"] is text
    assert type(plain.summary) is str and kept.model_dump_json() == '{"summary":"1.5 GiB","changes":{},' \
        '"total_bytes":0,"fits":true}'


@pytest.mark.parametrize("value", [3, None, 1.5, ["x"]])
def test_a_message_field_refuses_what_is_not_a_string_as_a_str_field_does(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        Suggestion(summary=value, changes={}, total_bytes=0, fits=True)  # type: ignore[arg-type]
    assert caught.value.errors(include_url=False) == [
        {"type": "string_type", "loc": ("summary",), "msg": "Input should be a valid string", "input": value}]


def test_message_fields_are_strings_in_the_json_schema() -> None:
    props = EstimateResponse.model_json_schema()["$defs"]["Suggestion"]["properties"]
    assert props["summary"] == {"title": "Summary", "type": "string"}
    assert EstimateResponse.model_json_schema()["properties"]["assumptions"]["items"] == {"type": "string"}
