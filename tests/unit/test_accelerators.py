"""Accelerator requests as SkyPilot users write them."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from corral.shared.accelerators import (
    AcceleratorOption,
    AcceleratorRequest,
    canonical_accelerator,
    parse_accelerators,
)


def _yaml(text: str) -> object:
    """The value as a YAML reader hands it over (flow sets become mappings of None)."""
    return yaml.safe_load(f"accelerators: {text}")["accelerators"]


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("a10g", "A10G"),
        ("A10g", "A10G"),
        ("a100-80gb", "A100-80GB"),
        (" H100 ", "H100"),
        ("tpu-v4-8", "TPU-V4-8"),
    ],
)
def test_canonical_name_is_upper_case(written: str, expected: str) -> None:
    assert canonical_accelerator(written) == expected


@pytest.mark.parametrize("bad", ["", "  ", "A100 80GB", "A100/8", "-A100"])
def test_canonical_name_rejects_odd_characters(bad: str) -> None:
    with pytest.raises(ValueError, match="expected a name like A100"):
        canonical_accelerator(bad)


@pytest.mark.parametrize(
    ("written", "name", "count"),
    [
        ("A100", "A100", 1),
        ("A100:1", "A100", 1),
        ("A100:8", "A100", 8),
        ("A100-80GB:8", "A100-80GB", 8),
    ],
)
def test_one_name_the_seed_forms(written: str, name: str, count: int) -> None:
    request = parse_accelerators(_yaml(written))
    assert request == AcceleratorRequest((AcceleratorOption(name, count),), ordered=False)


def test_flow_set_means_cheapest_of_them() -> None:
    request = parse_accelerators(_yaml("{A10:1, L4:1, A10g:1}"))
    assert request is not None
    assert request.ordered is False
    assert request.options == (
        AcceleratorOption("A10", 1),
        AcceleratorOption("L4", 1),
        AcceleratorOption("A10G", 1),
    )


def test_list_means_preference_order() -> None:
    request = parse_accelerators(_yaml("[A10:1, A10g:1, L4:1]"))
    assert request is not None
    assert request.ordered is True
    assert [str(o) for o in request.options] == ["A10:1", "A10G:1", "L4:1"]


def test_mapping_with_counts_as_values() -> None:
    # JSON files write the set as {"A10": 1, "L4": 2}; a None value means 1.
    request = parse_accelerators({"A10": 1, "L4": 2, "T4": None})
    assert request is not None
    assert request.options == (
        AcceleratorOption("A10", 1),
        AcceleratorOption("L4", 2),
        AcceleratorOption("T4", 1),
    )


def test_set_of_eight_each() -> None:
    request = parse_accelerators(_yaml("{A10g:8, A10:8, L4:8, A100:8}"))
    assert request is not None
    assert {o.name for o in request.options} == {"A10G", "A10", "L4", "A100"}
    assert {o.count for o in request.options} == {8}


def test_duplicates_after_canonicalisation_collapse_keeping_first_position() -> None:
    request = parse_accelerators(["A10g:1", "L4:1", "A10G:1"])
    assert request is not None
    assert [str(o) for o in request.options] == ["A10G:1", "L4:1"]


def test_braced_text_is_read_like_yaml() -> None:
    assert parse_accelerators("[A10:1, L4:1]") == AcceleratorRequest(
        (AcceleratorOption("A10", 1), AcceleratorOption("L4", 1)), ordered=True
    )
    request = parse_accelerators("{A10:1, L4:1}")
    assert request is not None and request.ordered is False


def test_none_is_no_request() -> None:
    assert parse_accelerators(None) is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("A100:0", "whole accelerator count >= 1"),
        ("A100:0.5", "whole accelerator count >= 1"),
        ("A100:x", "whole accelerator count >= 1"),
        ({"A100": -1}, "whole accelerator count >= 1"),
        ({"A100": True}, "whole accelerator count >= 1"),
        ({"A100:2": 2}, "give it once"),
        ({}, "at least one accelerator"),
        ([], "at least one accelerator"),
        ([["A100"]], "expected list items like 'A10:1'"),
        (8, "expected accelerators like A100"),
        ("A 100", "expected a name like A100"),
    ],
)
def test_bad_input_says_what_was_expected(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_accelerators(bad)


@given(
    names=st.lists(
        st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,6}", fullmatch=True),
        min_size=1,
        max_size=5,
        unique_by=str.upper,
    ),
    counts=st.lists(st.integers(min_value=1, max_value=16), min_size=5, max_size=5),
)
def test_list_round_trip_keeps_order_and_counts(names: list[str], counts: list[int]) -> None:
    written = [f"{name}:{count}" for name, count in zip(names, counts, strict=False)]
    request = parse_accelerators(written)
    assert request is not None and request.ordered
    assert [(o.name, o.count) for o in request.options] == [
        (name.upper(), count) for name, count in zip(names, counts, strict=False)
    ]
