"""A cloud call under the attempt deadline: a hung launch is cut off at it (and holds no later
launch up), a prompt one returns its machines, a bounded provider's runs in the caller."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from corral.services.providers.base import Features, LaunchSpec
from corral.services.runtime.launch import _launch_by_deadline
from corral.shared.errors import LaunchTimeoutError

SPEC = LaunchSpec(
    request_id="r", attempt_id="a", cloud="c", region="r1", zone="z1", instance_type="t"
)


class Cloud:
    features = Features()

    def __init__(self, hang_s: float = 0.0) -> None:
        self.hang_s = hang_s
        self.threads: list[threading.Thread] = []

    def launch(self, spec: LaunchSpec) -> list[Any]:
        self.threads.append(threading.current_thread())
        time.sleep(self.hang_s)
        return [spec.zone]


class BoundedCloud(Cloud):
    features = Features(bounded_launch=True)


def test_a_hung_launch_is_cut_off_and_the_next_call_is_not_held_behind_it() -> None:
    hung = Cloud(hang_s=3.0)
    started = time.monotonic()
    with pytest.raises(LaunchTimeoutError):
        _launch_by_deadline(hung, SPEC, time.monotonic() + 0.2)
    assert time.monotonic() - started < 1.5
    prompt = Cloud()
    assert _launch_by_deadline(prompt, SPEC, time.monotonic() + 2.0) == ["z1"]
    assert prompt.threads[0] is not hung.threads[0]  # the hung call still holds its thread


def test_a_bounded_providers_launch_runs_in_the_callers_thread() -> None:
    cloud = BoundedCloud()
    assert _launch_by_deadline(cloud, SPEC, time.monotonic() + 2.0) == ["z1"]
    assert cloud.threads == [threading.current_thread()]


def test_a_launch_error_reaches_the_caller() -> None:
    class Refusing(Cloud):
        def launch(self, spec: LaunchSpec) -> list[Any]:
            raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        _launch_by_deadline(Refusing(), SPEC, time.monotonic() + 2.0)
