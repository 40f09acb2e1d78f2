"""The names a program imports from varmq: what __all__ offers, and what stays importable."""

from __future__ import annotations

import importlib
import sys

import pytest

import varmq


def test_all_lists_what_a_program_writes_daily_and_every_name_of_it_is_there() -> None:
    assert len(varmq.__all__) <= 60
    assert sorted(varmq.__all__) == sorted(set(varmq.__all__))
    assert [name for name in varmq.__all__ if not hasattr(varmq, name)] == []


def test_the_go_parity_names_left_out_of_all_stay_importable_from_varmq() -> None:
    # Every error stays too: test_errors_metrics.py checks each of varmq.errors.__all__.
    kept = ["func", "err_func", "result_func", "EnqueuedGroupJob", "EnqueuedErrGroupJob"]
    kept += ["EnqueuedResultGroupJob", "ErrorHandler", "OnFull", "DurationHistogram"]
    assert [name for name in kept if getattr(varmq, name, None) is None] == []
    assert not set(kept) & set(varmq.__all__)


@pytest.mark.parametrize("name", ["protocols", "envelope", "topic_names"])
def test_a_module_moved_to_the_contract_stays_importable_for_a_release_and_says_where(
    name: str,
) -> None:
    sys.modules.pop(f"varmq.{name}", None)
    with pytest.warns(DeprecationWarning, match=f"varmq.contract.{name}"):
        moved = importlib.import_module(f"varmq.{name}")
    contract = importlib.import_module(f"varmq.contract.{name}")
    assert moved.__all__ == contract.__all__
    assert all(getattr(moved, n) is getattr(contract, n) for n in contract.__all__)
