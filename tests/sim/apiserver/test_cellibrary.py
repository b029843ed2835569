"""The Kubernetes CEL library functions the simulated API server evaluates, with CEL's equality."""

from __future__ import annotations

from typing import Any

import pytest

from cdctl.sim.apiserver.cellibrary import cel_equal, index_of, last_index_of, substring


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (False, 0, False),
        (True, True, True),
        ("a", "a", True),
        ("1", 1, False),
        (None, None, True),
        (None, "", False),
        ([1, "a"], [1.0, "a"], True),
        ([True], [1], False),
        ({"a": [1]}, {"a": [1.0]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ({"a": True}, {"a": 1}, False),
    ],
)
def test_cel_equality(left: Any, right: Any, equal: bool) -> None:
    assert cel_equal(left, right) is equal
    assert cel_equal(right, left) is equal


def test_list_index_of_uses_cel_equality() -> None:
    assert index_of([1, True, "x", True], True) == 1
    assert last_index_of([1, True, "x", True], True) == 3
    assert index_of([True], 1) == -1
    assert index_of([{"a": 1}], {"a": 1.0}) == 0
    assert last_index_of([], "x") == -1


def test_string_index_of_counts_code_points_and_checks_the_offset() -> None:
    assert index_of("héllo", "l") == 2
    assert index_of("hello mellow", "ello", 2) == 7
    assert last_index_of("hello mellow", "ello") == 7
    assert last_index_of("hello mellow", "ello", 6) == 1
    with pytest.raises(IndexError):
        index_of("abc", "a", 4)
    with pytest.raises(TypeError):
        index_of("abc", 1)
    with pytest.raises(TypeError):
        index_of({"a": 1}, "a")


def test_substring_takes_code_points_and_refuses_a_range_outside_the_string() -> None:
    assert substring("héllo", 1, 3) == "él"
    assert substring("hello", 2) == "llo"
    assert substring("hello", 5) == ""
    for start, end in ((6, None), (-1, 2), (3, 2), (0, 6)):
        with pytest.raises(IndexError):
            substring("hello", start, end)
    with pytest.raises(TypeError):
        substring(["h"], 0)
