"""How long a pool workload waits to be placed again after its machine dies, alone or with one
control-plane process killed at the same moment (the stalls make chaos saw). Not a test: run
it by hand, on `corral up` with the chaos test's timers:

    .venv/bin/python tests/stall_probe.py [victim ...]

victims: none, schedule, provision, beat, redis (default: all, in that order); a
victim with -late (provision-late) is killed once the workload was placed anew. For each, the
workload's machine is SIGKILLed (and the victim with it), then the script times the workload
back to RUNNING and prints its events, seconds after the kill. STALL_BEAT_LOCK_TIMEOUT_S
sets beat's lock timeout (else the shipped one)."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "integration"))

from chaos_audit import POOL, Records
from test_chaos_kinds import CLOUD, COMPUTE, TIMERS, Api, _kill, _pool_machine_of

from corral.services.cli.pools_api_cmd import pool_body

from faults import supervised, wait_ready
from harness import Up


def _pool_file(tmp: Path) -> Path:
    path = tmp / "pool.yaml"
    path.write_text(
        "kind: ANYSCALE_MANAGED\nmachine_types:\n- machine_type: cpu\n"
        "  launch_templates: [{instance_type: cpu-2}]\n"
        "  partitions: [{name: shared, size: 1}]\n"
    )
    return path


def _cloud_ids(records: Records, machines: list[Any]) -> list[str | None]:
    """The cloud's ids of a workload's machines that came up, from the machine table."""
    rows = records.machines.get_many(m.machine_id for m in machines if m.status != "launching")
    return [row.provider_id for row in rows.values()]


def _running(records: Records, rid: str, timeout_s: float, old: str = "") -> float:
    """Seconds until ``rid`` is RUNNING on a machine other than ``old``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            ledger = records.pools.get(POOL)
            ids = _cloud_ids(records, ledger.machines_of(rid) if ledger is not None else [])
            moved = any(pid and pid != old for pid in ids)
            if moved and records.state(rid) == "RUNNING":
                return time.monotonic() - start
        except Exception:  # Redis restarting
            pass
        time.sleep(0.1)
    return float("nan")


def _placed_anew(records: Records, rid: str, old: str) -> None:
    while True:
        ledger = records.pools.get(POOL)
        mine = ledger.machines_of(rid) if ledger is not None else []
        if any(m.status == "launching" for m in mine) or any(
            pid != old for pid in _cloud_ids(records, mine)
        ):
            return
        time.sleep(0.02)


def main(victims: list[str]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="stall-"))
    timers = dict(TIMERS)
    if lock_s := os.environ.get("STALL_BEAT_LOCK_TIMEOUT_S"):  # to compare lock timeouts
        timers["BEAT_LOCK_TIMEOUT_S"] = lock_s
    up = Up(tmp / "home", CLOUD, timers=timers, settings={"CORRAL_CLOUDS": '["local"]'})
    try:
        url, headers = wait_ready(up)
        api = Api(url, headers)
        records = Records((tmp / "home" / "redis-url").read_text().strip())
        api.patient("POST", "/v1/pools", pool_body(_pool_file(tmp), POOL, None))
        task = {"compute_config": COMPUTE, "priority": 0, "run": "sleep 600"}
        rid = api.submit("low", task)
        print(f"first placement: {_running(records, rid, 120):.1f} s", flush=True)
        for victim in victims:
            time.sleep(3)
            machine = _pool_machine_of(records, rid)
            t0 = time.time()
            _kill(machine)
            if victim.endswith("-late"):  # once the new machine is placed, mid-launch
                victim = victim.removesuffix("-late")
                _placed_anew(records, rid, machine)
            if victim == "redis":
                os.kill(supervised(up, "redis-server"), signal.SIGKILL)
            elif victim != "none":
                os.killpg(supervised(up, victim), signal.SIGKILL)
            waited = _running(records, rid, 240, old=machine)
            print(f"== machine + {victim}: RUNNING again {waited:.1f} s after the kill", flush=True)
            for event in records.store.events(rid):
                if event.at >= t0 - 0.01:
                    print(f"   {event.at - t0:6.1f} {event.text[:150]}", flush=True)
    finally:
        print("stopped:", up.stop(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["none", "schedule", "provision", "beat", "redis"])
