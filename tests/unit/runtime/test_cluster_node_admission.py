"""A cluster node's launch request stored but never admitted (its submitter died between
writing it and publishing the admission) is admitted again by the cluster's next tick after
RESEND_ADMIT_S, once: not only by reconcile's sweep, after the attempt deadline + 30 s. Over a
real redis-server, the cluster registered through the API, the ticks run in process and the
published messages recorded instead of sent (no worker takes them: a lost dispatch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.services.api import create_app
from corral.services.queues import dispatch
from corral.services.runtime import autoscaling
from corral.services.runtime.deps import Deps
from corral.services.settings import Settings
from corral.shared.lifecycle import RequestState

REPO = Path(__file__).resolve().parents[3]
TOKEN = "t0ken-for-tests"


def test_a_node_request_never_admitted_is_admitted_again_once(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(redis_url=redis_url, api_token=TOKEN, home=tmp_path)
    example = REPO / "examples" / "clusters" / "local-lab.yaml"
    body = {"cluster_yaml": example.read_text(), "file_name": "local-lab.yaml"}
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        assert api.post("/v1/clusters", json=body).status_code == 201

    sent: list[tuple[str, list[Any]]] = []

    def lost(name: str, args: Any = (), **_: Any) -> str:  # published, never delivered
        sent.append((name, list(args)))
        return "lost"

    monkeypatch.setattr(dispatch, "send", lost)
    now = [1_000_000.0]
    deps = Deps(settings, clock=lambda: now[0])

    def admits() -> list[str]:
        return [str(args[0]) for name, args in sent if name == dispatch.ADMIT]

    autoscaling.tick_cluster(deps, "local-lab")
    rec = autoscaling.clusters(deps).get("local-lab")
    assert rec is not None
    nodes = sorted(n.request_id for n in rec.live_nodes())
    assert any(n.kind == "head" for n in rec.live_nodes())
    assert sorted(admits()) == nodes  # the head and the minimum workers; admissions lost

    sent.clear()
    now[0] += autoscaling.RESEND_ADMIT_S / 2
    autoscaling.tick_cluster(deps, "local-lab")
    assert admits() == []  # young: their admissions may still be queued

    now[0] += autoscaling.RESEND_ADMIT_S
    autoscaling.tick_cluster(deps, "local-lab")
    autoscaling.tick_cluster(deps, "local-lab")  # the next tick does not send them again
    assert sorted(admits()) == nodes, sent
    for request_id in nodes:
        req = deps.store.get_request(request_id)
        assert req is not None and req.state == RequestState.PENDING
        texts = [e.text for e in deps.store.events(request_id)]
        assert any("admitted again" in t for t in texts), texts
