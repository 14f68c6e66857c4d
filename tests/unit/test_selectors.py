"""Label selectors of partition rules: every form, AND over commas, maps, and errors."""

from __future__ import annotations

import pytest

from corral.shared.scheduling.selectors import compile_selector, describe, matches

JOB_LLM = {"workload-type": "job", "project": "llm"}
SERVICE = {"workload-type": "service"}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("project", JOB_LLM, True),
        ("project", SERVICE, False),
        ("!project", JOB_LLM, False),
        ("!project", SERVICE, True),
        ("! project", SERVICE, True),
        ("project=llm", JOB_LLM, True),
        ("project=vision", JOB_LLM, False),
        ("project==llm", JOB_LLM, True),
        ("project != llm", JOB_LLM, False),
        ("project!=vision", JOB_LLM, True),
        ("project!=vision", SERVICE, True),  # a missing label is "not equal"
        ("workload-type in (job,service)", JOB_LLM, True),
        ("workload-type in ( job , service )", SERVICE, True),
        ("workload-type in (job)", SERVICE, False),
        ("workload-type notin (job,workspace)", SERVICE, True),
        ("workload-type notin (job,workspace)", JOB_LLM, False),
        ("team notin (a,b)", JOB_LLM, True),  # a missing label is in no set
        ("team in (a,b)", JOB_LLM, False),
    ],
)
def test_each_form(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert matches(selector, labels) is expected


def test_commas_are_and_outside_parentheses() -> None:
    selector = "workload-type in (job,service),project=llm,!preview"
    assert matches(selector, JOB_LLM) is True
    assert matches(selector, {**JOB_LLM, "preview": "yes"}) is False
    assert matches(selector, {"workload-type": "service", "project": "other"}) is False
    assert len(compile_selector(selector).terms) == 3


def test_empty_selector_matches_everything() -> None:
    assert matches("", {}) is True
    assert matches("   ", SERVICE) is True


def test_label_map_needs_every_label() -> None:
    assert matches({"workload-type": "job", "project": "llm"}, JOB_LLM) is True
    assert matches({"workload-type": "job", "project": "x"}, JOB_LLM) is False
    assert matches({"workload-type": "job"}, {"project": "llm"}) is False


def test_label_map_reads_yaml_numbers_and_booleans_as_text() -> None:
    assert matches({"tier": 1}, {"tier": "1"}) is True  # type: ignore[dict-item]
    assert matches({"gpu": True}, {"gpu": "true"}) is True  # type: ignore[dict-item]


def test_describe() -> None:
    assert describe({"b": "2", "a": "1"}) == "a=1,b=2"
    assert describe("  project=llm ") == "project=llm"


@pytest.mark.parametrize(
    "selector",
    [
        "workload-type in ()",
        "project llm",
        "project=(llm)",
        "a,,b",
        "project=llm,",
        "in (a)",
        "key in (a,b",
    ],
)
def test_unreadable_selector_names_itself(selector: str) -> None:
    with pytest.raises(ValueError) as caught:
        compile_selector(selector)
    assert f"selector {selector!r}" in str(caught.value)


def test_compiled_once() -> None:
    assert compile_selector("project=llm") is compile_selector("project=llm")
