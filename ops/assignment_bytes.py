"""The bytes a request's record of its work on a pooled machine stores, as an assignment
pointing at the machine's row (``Assignment``) against the full copy of the machine it replaced
(the same record as an ``Instance``: what a request's view of it still shows). One running
assignment on an AWS spot machine, then the same once ended.

Run: ``.venv/bin/python ops/assignment_bytes.py`` (issue #48, item 1).
"""

from __future__ import annotations

from corral.shared.lifecycle import InstanceState
from corral.shared.placement import Placement
from corral.shared.records import Assignment, Instance, Transition

AT = Placement("aws", "us-east-1", "us-east-1b", "g5.xlarge", "spot")
UP_AT = 1765000000.0


def main() -> None:
    row = Instance.new(
        "m-3f2a9c1d0e", "", 0, UP_AT, "requested by its pool", provider_id="i-0abc123def4567890",
        **AT.fields(), machine_type="g5.xlarge", price_usd_per_hour=0.4032, owner_kind="pool",
        owner_id="gpu-pool",
    )  # fmt: skip
    row.move(InstanceState.RUNNING, UP_AT + 60, "up in us-east-1b")
    now = UP_AT + 100.5
    first = Transition(from_state=None, to_state="REQUESTED", at=now,
                       reason=f"assigned pooled machine {row.id}")  # fmt: skip
    record = Assignment(
        id="i-1a2b3c4d5e", request_id="r-8c1f0e2a7b", node_index=0, machine_id=row.id,
        attempt_id=f"r-8c1f0e2a7b.{int(now * 1000)}.{row.id}",
        placement=f"r-8c1f0e2a7b.{int(now * 1000)}", state=InstanceState.REQUESTED,
        created_at=now, updated_at=now, history=[first],
    )  # fmt: skip
    view = record.view(row)
    view.move(InstanceState.RUNNING, now, "its pooled machine runs the work")
    print(f"running: copy {len(view.model_dump_json())} bytes, "
          f"assignment {len(record.follow(view).model_dump_json())} bytes")  # fmt: skip
    view.move(InstanceState.TERMINATED, now + 60, "released to the pool: its job exited 0")
    view.exit_code = 0
    print(f"ended:   copy {len(view.model_dump_json())} bytes, "
          f"assignment {len(record.follow(view).model_dump_json())} bytes")  # fmt: skip


if __name__ == "__main__":
    main()
