"""estimator.planner.gcpause.paused: automatic garbage collection off inside, restored after, counted across nested and
concurrent searches; a collector that was off stays off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from estimator.planner.gcpause import paused


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_turns_collection_off_and_back_on() -> None:
    gc.enable()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer search is still running
    assert gc.isenabled()


def test_paused_restores_on_error() -> None:
    gc.enable()
    with pytest.raises(ValueError), paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    with paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_searches_in_threads_re_enable_once_the_last_leaves() -> None:
    gc.enable()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with paused():
            second_in.set()
            first_out.wait(5)
            seen["after the first left"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after the first left": False}
    assert gc.isenabled()
