"""A request's task, typed: checked once at submit and carried, so the runtime's steps ask
:func:`task_of` rather than validating the stored dict again (issue #48, "the task parsed once";
the style guide's "compute once, carry it").

The stored form is unchanged: ``LaunchRequest.task`` stays the dict Redis holds (records
written before read as they did). A process keeps the tasks it typed by request id, each with
the dict it came from, and hands one back while the request's dict is still equal to it; a
rewritten task (``corral autostop`` rewrites ``resources.autostop``) is a new dict, typed again.
The submit remembers the task it has just checked (:func:`remember`), so the steps of a launch
that run in the process that accepted it validate nothing more; any other process types a
request's task on its first read of it, once (the memo is bounded: the least recently used
go first).

The Task handed out is shared by every caller in the process: read it, never change it
(``model_copy`` first); a stored task dict is never changed in place either (a rewrite assigns
a new one, as ``corral autostop`` does), or the memo could not tell.

:func:`parse` is the runtime's one door from a task document to a Task, for the documents it
writes itself (a replica's, a cluster node's).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from corral.shared.config.task import Task
from corral.shared.records import LaunchRequest

MEMO_SIZE = 1024  # requests whose typed task a process keeps

_memo: OrderedDict[str, tuple[dict[str, Any], Task]] = OrderedDict()
_lock = threading.Lock()


def parse(document: Mapping[str, Any]) -> Task:
    """A task document (the stored JSON form, or one the runtime composed) as a Task; raises
    pydantic's ValidationError as ``Task.model_validate`` does."""
    return Task.model_validate(document)


def task_of(req: LaunchRequest) -> Task:
    """``req``'s task, typed: the one this process already holds for it while its stored
    dict is unchanged, else parsed now (and kept). Shared: never change it."""
    with _lock:
        held = _memo.get(req.id)
        if held is not None and held[0] == req.task:
            _memo.move_to_end(req.id)
            return held[1]
    task = parse(req.task)
    _keep(req.id, req.task, task)
    return task


def remember(req: LaunchRequest, task: Task) -> None:
    """Keep ``task`` (what the submit checked, ``req.task`` its stored form) as ``req``'s, so
    the steps after the submit in this process do not parse it again."""
    _keep(req.id, req.task, task)


def forget_all() -> None:
    """Drop every task kept (tests, and a process that wants its memory back)."""
    with _lock:
        _memo.clear()


def _keep(request_id: str, stored: dict[str, Any], task: Task) -> None:
    with _lock:
        _memo[request_id] = (stored, task)
        _memo.move_to_end(request_id)
        while len(_memo) > MEMO_SIZE:
            _memo.popitem(last=False)
