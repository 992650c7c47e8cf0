"""estimator.memo.ObjectMemo: keyed by the identity of objects (catalog GPUs and servers), never by a reused id;
field_values: a frozen model's fields as a memo key."""

from __future__ import annotations

from estimator.memo import ObjectMemo, field_values
from estimator.request import Training


class _Thing:
    def __init__(self, value: int) -> None:
        self.value = value


def test_an_object_memo_answers_the_same_objects_from_memory_and_equal_copies_afresh() -> None:
    memo: ObjectMemo[int] = ObjectMemo(8)
    calls: list[int] = []

    def compute(thing: _Thing, extra: int) -> int:
        calls.append(1)
        return thing.value + extra

    a, b = _Thing(1), _Thing(1)
    assert memo.get_or_compute((a,), (10,), lambda: compute(a, 10)) == 11
    assert memo.get_or_compute((a,), (10,), lambda: compute(a, 10)) == 11
    assert len(calls) == 1
    assert memo.get_or_compute((a,), (20,), lambda: compute(a, 20)) == 21  # another extra: computed
    assert memo.get_or_compute((b,), (10,), lambda: compute(b, 10)) == 11  # another object: computed
    assert len(calls) == 3


def test_an_object_memo_does_not_match_a_new_object_at_a_reused_id() -> None:
    memo: ObjectMemo[str] = ObjectMemo(8)
    memo.get_or_compute((_Thing(1),), (), lambda: "first")
    # the entry keeps its object alive, so a new object cannot take its id; even if it could, the entry's
    # object is compared by identity
    assert memo.get_or_compute((_Thing(2),), (), lambda: "second") == "second"


def test_an_object_memo_is_bounded() -> None:
    memo: ObjectMemo[int] = ObjectMemo(2)
    things = [_Thing(i) for i in range(5)]
    for t in things:
        memo.get_or_compute((t,), (), lambda t=t: t.value)
    assert len(memo._data) <= 2


def test_field_values_are_equal_for_equal_models_and_differ_with_any_field() -> None:
    """Memo keys hold a request part's field values: equal for equal models (however they were made), different
    when any field differs."""
    base = Training(seq_len=2048)
    assert field_values(base) == field_values(Training.model_validate({"seq_len": 2048}))
    assert field_values(base) == field_values(Training(seq_len=4096).model_copy(update={"seq_len": 2048}))
    assert hash(field_values(base)) == hash(field_values(Training(seq_len=2048)))
    for name, value in {"seq_len": 4096, "method": "lora", "lora_dropout": 0.05, "train_tokens": 1e9}.items():
        assert field_values(base) != field_values(base.model_copy(update={name: value}))
