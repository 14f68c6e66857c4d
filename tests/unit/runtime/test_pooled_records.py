"""A pooled workload's records against a request that ends while they are written: a cancel
between the placement's check and its record's creation used to leave that record RUNNING
(its sweep had listed the request's records just before), and the pool's machine held."""

from __future__ import annotations

from collections.abc import Callable

from corral.services.runtime.deps import Deps
from corral.services.runtime.pooled.work import record_instance
from corral.shared.lifecycle import InstanceState, RequestState
from corral.shared.placement import Placement
from corral.shared.records import Instance, LaunchRequest

# A pooled machine that is up, as the machine table holds it (work runs on its row).
AT = Placement("local", "lab-east", "lab-east-a", "gpu-a100-8", "on_demand")
MACHINE = Instance.new(
    "m-1", "", 0, 0.0, provider_id="local-1", owner_kind="det_pool", owner_id="p", **AT.fields()
)
MACHINE.move(InstanceState.RUNNING, 0.0, "up")


def _stored(deps: Deps, state: RequestState) -> LaunchRequest:
    req = LaunchRequest(id="r-1", task={}, state=state, created_at=0, updated_at=0)
    assert deps.store.create_request(req)
    return req


def test_a_record_written_after_its_request_was_cancelled_ends_at_once(
    make_deps: Callable[..., Deps],
) -> None:
    deps = make_deps()
    _stored(deps, RequestState.CANCELLED)
    record_instance(deps, MACHINE, "r-1", 0, "a-1", placement="p-1")
    [inst] = deps.store.list_instances(request_id="r-1")
    assert inst.state == InstanceState.TERMINATED
    assert "its request ended (CANCELLED)" in inst.history[-1].reason


def test_a_record_of_a_running_request_stays_running(make_deps: Callable[..., Deps]) -> None:
    deps = make_deps()
    _stored(deps, RequestState.PROVISIONING)
    record_instance(deps, MACHINE, "r-1", 0, "a-1", placement="p-1")
    [inst] = deps.store.list_instances(request_id="r-1")
    assert inst.state == InstanceState.RUNNING
    assert deps.store.get_request("r-1").instance_ids == [inst.id]  # type: ignore[union-attr]
