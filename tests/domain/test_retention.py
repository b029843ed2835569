"""The retention policy's values and how a horizon is chosen (cdctl.domain.retention)."""

from __future__ import annotations

import pytest

from cdctl.domain.errors import InvalidInput
from cdctl.domain.retention import (
    LogFacts,
    RetentionPolicy,
    choose_horizon,
    format_age,
    format_size,
    parse_age,
    parse_interval,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * 86400.0),
        ("12h", 43200.0),
        ("90m", 5400.0),
        ("1w", 604800.0),
        ("3600", 3600.0),
        ("0", 0.0),
    ],
)
def test_ages_take_a_unit(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"),
    [("1GiB", 1 << 30), ("512MiB", 512 << 20), ("2GB", 2_000_000_000), ("3Gi", 3 << 30), ("1048576", 1 << 20),
     ("0", 0), ("1.5gib", 3 << 29)],
)  # fmt: skip
def test_sizes_take_decimal_and_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["thirty days", "30 days", "-1d", "30y", "", "1 d"])
def test_a_bad_age_names_the_flag(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"--retention-age: .* is not an age"):
        parse_age(text)


@pytest.mark.parametrize("text", ["1 gigabyte", "-5MiB", "1PiB", "GiB"])
def test_a_bad_size_names_the_flag(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"--retention-size: .* is not a size"):
        parse_size(text)


@pytest.mark.parametrize(("text", "seconds"), [("1h", 3600.0), ("30s", 30.0), ("2", 2.0), ("1.5m", 90.0)])
def test_intervals_take_a_unit(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize(
    ("text", "complaint"),
    [("0", "shorter than a second"), ("0.5s", "shorter than a second"), ("often", "is not an interval")],
)
def test_an_interval_under_a_second_or_unreadable_names_the_flag(text: str, complaint: str) -> None:
    with pytest.raises(InvalidInput, match=f"--retention-interval: .*{complaint}"):
        parse_interval(text)


def test_bounds_too_small_to_hold_anything_are_refused_but_zero_turns_them_off() -> None:
    with pytest.raises(InvalidInput, match="shorter than a minute"):
        parse_age("30s")
    with pytest.raises(InvalidInput, match="under 1 MiB"):
        parse_size("512KiB")
    assert not RetentionPolicy(0, 0).enabled and RetentionPolicy().enabled


def test_formats_read_back_as_the_same_value() -> None:
    for seconds in (30 * 86400.0, 43200.0, 90.0 * 60, 604800.0, 3601.0):
        assert parse_age(format_age(seconds)) == seconds
    for size in (1 << 30, 512 << 20, 3 << 29, (1 << 20) + 1):
        assert parse_size(format_size(size)) == size
    assert RetentionPolicy().describe() == "age 30d, size 1GiB"


def facts(**kw: int) -> LogFacts:
    values = {"first": 1, "head": 1000, "live_bytes": 10_000, "aged_until": 0, "cap": 1000} | kw
    return LogFacts(**values)


def test_the_age_bound_removes_the_aged_prefix() -> None:
    assert choose_horizon(facts(aged_until=400), RetentionPolicy(86400, 0)) == (400, "age")
    assert choose_horizon(facts(aged_until=0), RetentionPolicy(86400, 0)) == (0, "")


def test_the_size_bound_removes_the_oldest_share_down_to_nine_tenths() -> None:
    horizon, reason = choose_horizon(facts(live_bytes=20_000), RetentionPolicy(0, 10_000))
    assert reason == "size" and horizon == 550  # 11,000 of 20,000 bytes over the target: 55% of 1000 events
    assert choose_horizon(facts(live_bytes=9_999), RetentionPolicy(0, 10_000)) == (0, "")


def test_both_bounds_take_the_further_and_name_both() -> None:
    assert choose_horizon(facts(live_bytes=20_000, aged_until=700), RetentionPolicy(86400, 10_000)) == (
        700,
        "age+size",
    )


def test_nothing_past_what_the_projections_folded_nor_before_the_first_kept_event() -> None:
    assert choose_horizon(facts(aged_until=900, cap=300), RetentionPolicy(86400, 0)) == (300, "age")
    assert choose_horizon(facts(first=501, aged_until=900, cap=400), RetentionPolicy(86400, 0)) == (0, "")
    assert choose_horizon(facts(first=501, head=500), RetentionPolicy(86400, 10)) == (0, "")
