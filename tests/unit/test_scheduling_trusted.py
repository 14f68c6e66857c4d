"""The scheduler's unvalidated builders make the very models the constructors make."""

from __future__ import annotations

import copy
import pickle

import pytest
from pydantic import ValidationError

from corral.shared.scheduling import trusted
from corral.shared.scheduling.model import NodeAssignment, Pending, Placement, Plan, TaskPending


def test_a_built_node_is_the_validated_one() -> None:
    for machine_id in ("m-1", None):
        built = trusted.node("t", "p", machine_id)
        made = NodeAssignment(machine_type="t", partition="p", machine_id=machine_id)
        assert type(built) is NodeAssignment
        assert built == made and hash(built) == hash(made)
        assert built.model_fields_set == made.model_fields_set
        assert built.model_dump_json() == made.model_dump_json()
        assert built.model_dump(exclude_unset=True) == made.model_dump(exclude_unset=True)
        assert trusted.nodes("t", "p", ["a", "b"]) == [
            NodeAssignment(machine_type="t", partition="p", machine_id=m) for m in ("a", "b")
        ]


def test_a_built_placement_is_the_validated_one_and_stays_frozen() -> None:
    nodes = (trusted.node("t", "p", "m-1"), trusted.node("t", "p", None))
    built = trusted.placement("w1", nodes, "placed 2 node(s): 2 on t/p")
    made = Placement(workload_id="w1", nodes=nodes, reason="placed 2 node(s): 2 on t/p")
    assert built == made and hash(built) == hash(made)
    assert built.model_fields_set == made.model_fields_set
    assert Placement.model_validate_json(built.model_dump_json()) == made
    assert pickle.loads(pickle.dumps(built)) == made
    assert copy.deepcopy(built) == made
    with pytest.raises(ValidationError):
        built.reason = "changed"  # type: ignore[misc]
    changed = built.model_copy(update={"reason": "x"})
    assert changed.reason == "x" and built.reason == "placed 2 node(s): 2 on t/p"
    assert built.model_fields_set == {"workload_id", "nodes", "reason"}
    # The fields set the built models share is never changed through one of them.
    node = trusted.node("t", "p", "m-2").model_copy(update={"machine_id": None})
    assert node.model_fields_set == {"machine_type", "partition", "machine_id"}
    assert trusted.node("t", "p", "m-3").model_fields_set == {
        "machine_type",
        "partition",
        "machine_id",
    }
    assert trusted.node("t", "p", "m-4").model_fields_set is not node.model_fields_set
    plan = Plan(pool="p", based_on={}, computed_at=0.0, placements=(built,))
    assert Plan.model_validate_json(plan.model_dump_json()).placements == (made,)


def test_what_one_workload_was_told_is_copied_for_another_as_model_copy_would() -> None:
    for told in (
        Pending(workload_id="w1", code="partition_full", reason="full"),
        Pending(workload_id="w1", code="preempted", reason="r", preempted_by="w0"),
    ):
        built = trusted.pending_for(told, "w2")
        copied = told.model_copy(update={"workload_id": "w2"})
        assert built == copied and hash(built) == hash(copied)
        assert built.model_fields_set == copied.model_fields_set
        assert built.model_dump_json() == copied.model_dump_json()
        assert told.workload_id == "w1" and built.workload_id == "w2"


def test_the_builders_check_the_models_they_bypass() -> None:
    """If pydantic or the models change shape, the builders fall back to the constructors."""
    assert trusted._NODE_PLAIN and trusted._PLACEMENT_PLAIN and trusted._PENDING_PLAIN
    assert not trusted._plain(NodeAssignment, ("machine_type", "partition"))


def test_a_built_pending_is_the_validated_one() -> None:
    for preempted_by in (None, "w0"):
        built = trusted.pending("w1", "partition_full", "full", preempted_by)
        made = Pending(
            workload_id="w1", code="partition_full", reason="full", preempted_by=preempted_by
        )
        assert type(built) is Pending
        assert built == made and hash(built) == hash(made)
        assert built.model_fields_set == made.model_fields_set
        assert built.model_dump_json() == made.model_dump_json()
        assert built.model_dump(exclude_unset=True) == made.model_dump(exclude_unset=True)
        assert pickle.loads(pickle.dumps(built)) == made


def test_a_built_task_pending_is_the_validated_one() -> None:
    built = trusted.task_pending("t1", "pool_full", "no agent of p has 1 free slot(s)")
    made = TaskPending(task_id="t1", code="pool_full", reason="no agent of p has 1 free slot(s)")
    assert trusted._TASK_PENDING_PLAIN
    assert type(built) is TaskPending
    assert built == made and hash(built) == hash(made)
    assert built.model_fields_set == made.model_fields_set
    assert built.model_dump_json() == made.model_dump_json()
    assert built.model_dump(exclude_unset=True) == made.model_dump(exclude_unset=True)
    assert pickle.loads(pickle.dumps(built)) == made
    with pytest.raises(ValidationError):
        built.reason = "changed"  # type: ignore[misc]
    assert built.model_copy(update={"budget": "b"}).model_fields_set == {
        "task_id",
        "code",
        "reason",
        "budget",
    }
    assert trusted.task_pending("t2", "pool_full", "r").model_fields_set == {
        "task_id",
        "code",
        "reason",
    }
