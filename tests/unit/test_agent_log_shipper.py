"""The node agent's log shipper sends the rest of the log before the last report: it tries
again while the API cannot be reached, but not once the API has ended the node (HTTP 403 for
good): a terminated machine's agent then exits at once instead of trying for drain's 10 s."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from corral.services.agent.link import Dismissed, LinkError
from corral.services.agent.node import HttpLink, LogShipper


class RefusingLink(HttpLink):
    """A link whose every call fails with ``error``; it counts the calls."""

    def __init__(self, error: LinkError) -> None:
        super().__init__("http://127.0.0.1:1", "cn2.n.token")
        self.error = error
        self.calls = 0

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        self.calls += 1
        raise self.error


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "node.log"
    path.write_text("the service's last words\n")
    return path


def test_drain_stops_at_once_when_the_node_has_ended(tmp_path: Path) -> None:
    link = RefusingLink(Dismissed("POST /v1/node/logs: HTTP 403 node has ended"))
    started = time.monotonic()
    LogShipper(link, _log(tmp_path)).drain(timeout_s=10)
    assert time.monotonic() - started < 1
    assert link.calls == 1


def test_drain_tries_again_while_the_api_cannot_be_reached(tmp_path: Path) -> None:
    link = RefusingLink(LinkError("POST /v1/node/logs: connection refused"))
    LogShipper(link, _log(tmp_path)).drain(timeout_s=0.6)
    assert link.calls >= 2
