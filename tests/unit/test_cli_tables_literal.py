"""Every table and line the CLI prints shows its data as written: a name or message that looks
like rich markup (``[red]``) or an emoji code (``:100:``) is printed literally, never styled or
turned into a picture (``H100:100:`` once printed as ``H100💯``)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from corral.services.cli import cluster_cmd, gpus_cmd, jobs_cmd, output, plan_cmd, requests_cmd
from corral.shared.catalog.gpus import AcceleratorOffer, AcceleratorSummary
from corral.shared.placement import Placement
from corral.shared.planner import Candidate, Plan

# Values a user, a cloud or an error message may carry, each a trap for rich.
TRICKY = ("H100:100:", "[red]boom[/red]", "[bold]x", ":thumbs_up:")
NAME, MARKUP, OPEN_TAG, EMOJI = TRICKY


def _attempt() -> dict[str, Any]:
    return {
        "cloud": "local",
        "region": EMOJI,
        "zone": NAME,
        "instance_type": MARKUP,
        "market": "spot",
        "outcome": "failed",
        "error": f"{OPEN_TAG} asked {NAME}",
    }


def _instance() -> dict[str, Any]:
    return {
        "id": "i-1",
        "request_id": MARKUP,
        "state": "RUNNING",
        "cloud": "local",
        "region": "r",
        "zone": NAME,
        "instance_type": EMOJI,
        "market": "on_demand",
        "machine_type": OPEN_TAG,
        "provider_id": MARKUP,
        "pid": 7,
    }


def _view() -> dict[str, Any]:
    now = time.time()
    return {
        "id": "r-1",
        "name": MARKUP,
        "state": "RUNNING",
        "attempts": [_attempt()],
        "instances": [_instance()],
        "endpoints": [f"http://{NAME}"],
        "ready": True,
        "runs": [
            {
                "cloud": "local",
                "region": EMOJI,
                "zone": NAME,
                "nodes": 2,
                "started_at": now - 5,
                "ended_at": None,
                "outcome": OPEN_TAG,
                "cost_usd": 0.5,
            }
        ],
        "relaunches": 0,
        "restarts": 0,
        "cost_usd": 0.5,
    }


def _assert_literal(text: str, *values: str) -> None:
    for value in values:
        assert value in text, f"{value!r} not printed as written in:\n{text}"
    assert "💯" not in text and "👍" not in text


def test_request_tables_print_names_and_errors_literally(
    capsys: pytest.CaptureFixture[str],
) -> None:
    requests_cmd._print_status([_view()], None)  # the list of requests
    requests_cmd._print_status([_view()], "r-1")  # one request: attempts, instances, runs
    printed = capsys.readouterr().out
    _assert_literal(printed, *TRICKY, f"{OPEN_TAG} asked {NAME}")


def test_cluster_tables_print_names_literally(capsys: pytest.CaptureFixture[str]) -> None:
    view = {
        "name": MARKUP,
        "state": "UP",
        "cloud": "local",
        "nodes": [
            {
                "id": NAME,
                "node_type": EMOJI,
                "kind": "worker",
                "state": "RUNNING",
                "idle_s": 3.0,
                "used": {OPEN_TAG: 1.0},
            }
        ],
        "failed_nodes": [{"id": "n-2", "node_type": EMOJI, "failure": MARKUP}],
        "demand": {"bundles": [{"count": 2, "resources": {NAME: 1}}]},
        "cooldowns": {EMOJI: time.time() + 90},
    }
    cluster_cmd._print_status(view)
    printed = capsys.readouterr().out
    _assert_literal(printed, *TRICKY)
    # A cooldown reads as a time of day and what is left, never as a raw epoch.
    assert re.search(r"Cooled down: :thumbs_up: \(until \d\d:\d\d:\d\d, in (89|90) s\)", printed)


def test_gpu_tables_print_names_literally(capsys: pytest.CaptureFixture[str]) -> None:
    summary = AcceleratorSummary(name=NAME, counts=(1, 8), clouds=(MARKUP,))
    offer = AcceleratorOffer(
        accelerator=NAME,
        count=8,
        cloud=OPEN_TAG,
        instance_type=EMOJI,
        vcpus=96,
        memory_gib=1152,
        price_usd_per_hour=30.0,
        region=MARKUP,
        spot_price_usd_per_hour=None,
        spot_region=None,
    )
    plan_cmd.print_table(gpus_cmd._summary_table([summary]))
    plan_cmd.print_table(gpus_cmd._offer_table([offer]))
    _assert_literal(capsys.readouterr().out, *TRICKY)


def test_plan_table_prints_names_literally(capsys: pytest.CaptureFixture[str]) -> None:
    place = Placement("local", "r", NAME, MARKUP, "on_demand")
    candidate = Candidate(place, {EMOJI.strip(":"): 1, OPEN_TAG: 2}, 4, 16, 1.0, 1)
    plan_cmd.print_table(plan_cmd.render_table(Plan([candidate]), 1, every_zone=True))
    _assert_literal(capsys.readouterr().out, NAME, MARKUP, f"{OPEN_TAG}:2")


def test_lines_and_notices_print_literally(capsys: pytest.CaptureFixture[str]) -> None:
    output.notice(f"{NAME} {MARKUP}")
    output.err.print(f"error: {EMOJI} {OPEN_TAG}", markup=False)
    output.out.print(f"{NAME} {EMOJI}", markup=False)
    printed = capsys.readouterr()
    _assert_literal(printed.err, NAME, MARKUP, EMOJI, OPEN_TAG)
    _assert_literal(printed.out, NAME, EMOJI)


def test_the_job_queue_prints_job_names_literally(capsys: pytest.CaptureFixture[str]) -> None:
    jobs = [
        {"id": 1, "name": NAME, "submitted_at": time.time() - 60, "started_at": time.time() - 50,
         "ended_at": time.time(), "state": "SUCCEEDED", "exit_code": 0},
        {"id": 2, "name": MARKUP, "submitted_at": time.time(), "state": "PENDING"},
        {"id": 3, "name": EMOJI, "submitted_at": time.time(), "state": "PENDING"},
    ]  # fmt: skip
    jobs_cmd.print_queue("r-1", jobs)
    printed = capsys.readouterr().out
    _assert_literal(printed, NAME, MARKUP, EMOJI)
    assert "SUCCEEDED" in printed and "0m 50s" in printed
