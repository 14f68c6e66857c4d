"""Plan parts built from values a pass already holds, without validating them a second time.

A pass puts thousands of nodes and placements in a plan, from strings it read out of a
validated snapshot; pydantic's validation of each again is most of what placing costs. These
builders make the same frozen models as the constructors, ``__dict__`` and fields set alike
(what ``model_construct`` does, without its per-field search for aliases and defaults), so the
plan compares, hashes and serialises as before. Where a model's shape is not the plain one
they rely on (a post-init hook, private attributes, other fields), they call the constructor.

Every model built here has all its fields set, so they share one fields-set per model, as
``model_construct(_fields_set=...)`` allows: pydantic never changes it in place (the models are
frozen, and ``model_copy`` copies it before adding to it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from .model import DetPendingCode, NodeAssignment, Pending, PendingCode, Placement, TaskPending

_new = object.__new__
# The four slots' own setters, called directly (as ``object.__setattr__`` ends up doing, without
# its look-up of the name on the class).
_SLOTS = vars(BaseModel)
_set_dict = _SLOTS["__dict__"].__set__
_set_fields = _SLOTS["__pydantic_fields_set__"].__set__
_set_extra = _SLOTS["__pydantic_extra__"].__set__
_set_private = _SLOTS["__pydantic_private__"].__set__


def _plain(cls: type[BaseModel], fields: tuple[str, ...]) -> bool:
    """Whether an instance is exactly its four slots, filled as below."""
    return (
        BaseModel.__slots__
        == ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
        and not cls.__pydantic_post_init__
        and not cls.__private_attributes__
        and not cls.__pydantic_root_model__
        and tuple(cls.model_fields) == fields
        # the slots set here are BaseModel's own, not ones a subclass put over them
        and next(k for k in cls.__mro__ if "__dict__" in vars(k)) is BaseModel
    )


M = TypeVar("M", bound=BaseModel)
# Per model class: whether ``updated`` may copy its instances itself (see ``_copyable``).
_COPYABLE: dict[type[BaseModel], bool] = {}


def _copyable(cls: type[BaseModel]) -> bool:
    """Whether ``model_copy(update=...)`` of an instance is its dict copied and updated and
    its fields set grown by the keys: no extra fields allowed, no private attributes, no slot
    of BaseModel's put over by a subclass."""
    found = _COPYABLE.get(cls)
    if found is None:
        found = _COPYABLE[cls] = (
            cls.model_config.get("extra") != "allow"
            and not cls.__private_attributes__
            and not cls.__pydantic_root_model__
            and next(k for k in cls.__mro__ if "__dict__" in vars(k)) is BaseModel
        )
    return found


def updated(model: M, update: Mapping[str, Any]) -> M:
    """``model.model_copy(update=update)`` (``update``: fields of the model), without its
    generic copy of every slot: a pass narrows or re-words hundreds of waiting workloads."""
    cls = type(model)
    if not _copyable(cls) or model.__pydantic_extra__ is not None:
        return model.model_copy(update=update)
    made = _new(cls)
    _set_dict(made, {**model.__dict__, **update})
    _set_fields(made, model.__pydantic_fields_set__ | update.keys())
    _set_extra(made, None)
    _set_private(made, None)
    return made


_NODE_PLAIN = _plain(NodeAssignment, ("machine_type", "partition", "machine_id"))
_PLACEMENT_PLAIN = _plain(Placement, ("workload_id", "nodes", "reason"))
_PENDING_PLAIN = _plain(Pending, ("workload_id", "code", "reason", "preempted_by", "budget"))
_TASK_PENDING_PLAIN = _plain(TaskPending, ("task_id", "code", "reason", "budget"))
_NODE_FIELDS = {"machine_type", "partition", "machine_id"}
_PLACEMENT_FIELDS = {"workload_id", "nodes", "reason"}


def node(machine_type: str, partition: str, machine_id: str | None) -> NodeAssignment:
    """``NodeAssignment(machine_type=..., partition=..., machine_id=...)``."""
    if not _NODE_PLAIN:
        return NodeAssignment(machine_type=machine_type, partition=partition, machine_id=machine_id)
    made = _new(NodeAssignment)
    _set_dict(
        made, {"machine_type": machine_type, "partition": partition, "machine_id": machine_id}
    )
    _set_fields(made, _NODE_FIELDS)
    _set_extra(made, None)
    _set_private(made, None)
    return made


def nodes(
    machine_type: str, partition: str, machine_ids: Sequence[str | None]
) -> list[NodeAssignment]:
    """``node`` for each of these machines of one partition."""
    if not _NODE_PLAIN:
        return [
            NodeAssignment(machine_type=machine_type, partition=partition, machine_id=m)
            for m in machine_ids
        ]
    out = []
    for machine_id in machine_ids:  # node(), without a call per node
        made = _new(NodeAssignment)
        _set_dict(
            made, {"machine_type": machine_type, "partition": partition, "machine_id": machine_id}
        )
        _set_fields(made, _NODE_FIELDS)
        _set_extra(made, None)
        _set_private(made, None)
        out.append(made)
    return out


def placement(workload_id: str, nodes: tuple[NodeAssignment, ...], reason: str) -> Placement:
    """``Placement(workload_id=..., nodes=..., reason=...)``."""
    if not _PLACEMENT_PLAIN:
        return Placement(workload_id=workload_id, nodes=nodes, reason=reason)
    made = _new(Placement)
    _set_dict(made, {"workload_id": workload_id, "nodes": nodes, "reason": reason})
    _set_fields(made, _PLACEMENT_FIELDS)
    _set_extra(made, None)
    _set_private(made, None)
    return made


_PENDING_FIELDS = {"workload_id", "code", "reason", "preempted_by"}


def pending(workload_id: str, code: PendingCode, reason: str, preempted_by: str | None) -> Pending:
    """``Pending(workload_id=..., code=..., reason=..., preempted_by=...)`` (``budget`` left
    unset, as that call leaves it)."""
    if not _PENDING_PLAIN:
        return Pending(workload_id=workload_id, code=code, reason=reason, preempted_by=preempted_by)
    made = _new(Pending)
    _set_dict(
        made,
        {
            "workload_id": workload_id,
            "code": code,
            "reason": reason,
            "preempted_by": preempted_by,
            "budget": None,
        },
    )
    _set_fields(made, _PENDING_FIELDS)
    _set_extra(made, None)
    _set_private(made, None)
    return made


def pending_for(told: Pending, workload_id: str) -> Pending:
    """``told.model_copy(update={"workload_id": workload_id})``: what one workload was told,
    for another (a required field, so the fields set is the same)."""
    if not _PENDING_PLAIN or "workload_id" not in told.model_fields_set:
        return told.model_copy(update={"workload_id": workload_id})
    made = _new(Pending)
    _set_dict(made, {**told.__dict__, "workload_id": workload_id})
    _set_fields(made, told.model_fields_set)
    _set_extra(made, None)
    _set_private(made, None)
    return made


_TASK_PENDING_FIELDS = {"task_id", "code", "reason"}


def task_pending(task_id: str, code: DetPendingCode, reason: str) -> TaskPending:
    """``TaskPending(task_id=..., code=..., reason=...)`` (``budget`` left unset, as that call
    leaves it): a Determined pass tells every task of a long queue why it waits."""
    if not _TASK_PENDING_PLAIN:
        return TaskPending(task_id=task_id, code=code, reason=reason)
    made = _new(TaskPending)
    _set_dict(made, {"task_id": task_id, "code": code, "reason": reason, "budget": None})
    _set_fields(made, _TASK_PENDING_FIELDS)
    _set_extra(made, None)
    _set_private(made, None)
    return made


A = TypeVar("A")


def kept_or_made(
    kept: dict[str, list[tuple[Any, A]]],
    key: str,
    says: Any,
    make: Callable[..., A],
    *args: Any,
    limit: int = 50_000,
) -> A:
    """The answer kept under ``key`` that was made when it said ``says`` (equal), else
    ``make(*args)``'s, kept. A long queue is told the same pass after pass, and a full
    pool's text may go back and forth between two: the last two answers per key are kept (the
    very objects, given again). ``limit``: keys kept at most (then all are forgotten)."""
    answers = kept.get(key)
    if answers is not None:
        for was, answer in answers:
            if was == says:
                return answer
    answer = make(*args)
    if answers is None:
        if len(kept) >= limit:
            kept.clear()
        kept[key] = [(says, answer)]
    else:
        answers.insert(0, (says, answer))
        del answers[2:]
    return answer
