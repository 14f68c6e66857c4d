"""The project quota rule (corral.shared.quotas): GPUs at once, dollars per period, which
requests count against which, and the refusal's words and numbers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.shared.config.task import Task
from corral.shared.quotas import (
    Quota,
    Usage,
    check,
    counts_against,
    gpus_asked,
    period_start,
    spent_usd,
)

DAY = 86400.0
NOW = 10 * DAY + 3600.0  # one hour into day 10


def usage(gpus: int = 0, spent: float = 0.0) -> Usage:
    return Usage(gpus_in_use=gpus, spent_usd=spent, period_start=period_start(NOW, DAY), now=NOW)


def test_no_quota_refuses_nothing() -> None:
    assert check("llm", Quota(), usage(gpus=1000, spent=1e6), 64) is None


def test_gpus_within_the_quota_pass_and_one_over_is_refused_with_its_numbers() -> None:
    quota = Quota(gpus=8)
    assert check("llm", quota, usage(gpus=4), 4) is None  # exactly the limit
    refused = check("llm", quota, usage(gpus=4), 5)
    assert refused is not None
    assert (refused.quota, refused.limit, refused.in_use, refused.asked) == ("gpus", 8, 4, 5)
    assert refused.reason == (
        "project 'llm' is over its quota gpus: 4 in use + 5 asked > 8 allowed at once"
    )
    assert refused.to_dict()["project"] == "llm"


def test_a_cpu_request_passes_a_full_gpu_quota() -> None:
    assert check("llm", Quota(gpus=0), usage(gpus=0), 0) is None
    assert check("llm", Quota(gpus=2), usage(gpus=2), 0) is None


def test_a_spent_period_refuses_any_request_and_names_the_dollars() -> None:
    quota = Quota(usd_per_period=100.0)
    assert check("llm", quota, usage(spent=99.99), 0) is None
    refused = check("llm", quota, usage(spent=100.0), 0)
    assert refused is not None and refused.quota == "usd_per_period"
    assert (refused.limit, refused.in_use) == (100.0, 100.0)
    assert "100.00 of 100.00 USD spent in this 24 h period" in refused.reason
    assert "the next starts in 23.0 h" in refused.reason


def test_the_dollar_quota_is_named_before_the_gpus_when_both_refuse() -> None:
    refused = check("llm", Quota(gpus=1, usd_per_period=1.0), usage(gpus=1, spent=2.0), 1)
    assert refused is not None and refused.quota == "usd_per_period"


def test_periods_start_at_multiples_of_their_length() -> None:
    assert period_start(NOW, DAY) == 10 * DAY
    assert period_start(10 * DAY, DAY) == 10 * DAY
    assert period_start(NOW, 3600.0) == NOW


def test_spend_is_clipped_to_the_window_and_to_now() -> None:
    start = period_start(NOW, DAY)
    bills = [
        (start - 3600.0, start + 1800.0, 10.0),  # ran 30 min of it before ending: 5 USD
        (start + 1800.0, None, 4.0),  # runs since 30 min in: 2 USD by now
        (start - 7200.0, start - 3600.0, 100.0),  # ended before the window: nothing
        (start, None, None),  # price unknown: counted as nothing
    ]
    assert spent_usd(bills, start, NOW) == pytest.approx(7.0)


def test_gpus_asked_takes_the_largest_option_times_the_nodes() -> None:
    def task(**fields: object) -> Task:
        return Task.model_validate({"run": "true", **fields})

    assert gpus_asked(task(resources={"accelerators": "A100:8"}, num_nodes=2)) == 16
    assert gpus_asked(task(resources={"accelerators": {"A10": 1, "L4": 2}})) == 2
    assert (
        gpus_asked(
            task(resources={"any_of": [{"accelerators": "A10:1"}, {"accelerators": "A100:4"}]})
        )
        == 4
    )
    assert gpus_asked(task(resources={"cpus": 2})) == 0


def test_an_earlier_request_counts_whatever_its_state_a_later_one_only_once_admitted() -> None:
    # The later of two racing admissions always counts the earlier one: both never pass.
    assert counts_against(1.0, False, 2.0, "r-a", "r-b")  # earlier, still PENDING
    assert not counts_against(3.0, False, 2.0, "r-c", "r-b")  # later, not admitted yet
    assert counts_against(3.0, True, 2.0, "r-c", "r-b")  # later, admitted already
    assert not counts_against(2.0, True, 2.0, "r-b", "r-b")  # never itself
    # Same creation time: the id breaks the tie one way only.
    assert counts_against(2.0, False, 2.0, "r-a", "r-b") != counts_against(
        2.0, False, 2.0, "r-b", "r-a"
    )


def test_a_quota_refuses_negative_limits_and_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        Quota(gpus=-1)
    with pytest.raises(ValidationError):
        Quota.model_validate({"gpu": 4})
    with pytest.raises(ValidationError):
        Quota(period_s=0)
    with pytest.raises(ValidationError):  # found by the API's fuzz test: floor(now / 5e-324)
        Quota(period_s=5e-324)
    with pytest.raises(ValidationError):
        Quota(usd_per_period=float("inf"))
