"""What the cluster autoscaler reads and what it answers, as plain data that serializes to JSON.

Inputs:

- :class:`ClusterSpec`: the node types (their resources, bounds and launch hash) and the
  cluster-wide limits, built from a cluster file by :mod:`corral.shared.autoscaler.resources`;
- :class:`Node`: one node of the cluster now (the head included), as the NODES file and the
  store write it;
- :class:`Demand`: pending work, as bundle shapes with counts and placement groups.

Output: :class:`Plan`: node types to launch with counts, node ids to terminate, and the
reasons, one line each, that ``corral autoscale explain`` prints.

Resource amounts are written as Ray writes them: ``CPU``/``GPU`` counts (fractions allowed),
``memory`` in bytes, custom resources by name. The user-file models (:class:`Demand`,
:class:`Node`) forbid unknown keys, so a typo is an error with its line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from ..config import one_of
from ..config.base import StrictModel
from ..configio import ConfigError, Document, PathKey, validate_doc
from ..lifecycle import INSTANCE_STATES, InstanceState

# The finest amount the autoscaler tells apart (Ray's own resource granularity).
RESOURCE_UNIT = 0.0001
MEMORY_KEYS = frozenset({"memory", "object_store_memory"})  # amounts in bytes
GIB = 2**30


def _check_amounts(resources: dict[str, float]) -> dict[str, float]:
    for name, amount in resources.items():
        if not name:
            raise ValueError("a resource name must not be empty")
        if not math.isfinite(amount) or amount < 0:
            raise ValueError(f"{name}: expected an amount >= 0, got {amount!r}")
    return resources


def _check_bundle(resources: dict[str, float]) -> dict[str, float]:
    if not any(amount >= RESOURCE_UNIT for amount in resources.values()):
        raise ValueError(
            f"a bundle must ask for some resource (an amount of at least {RESOURCE_UNIT})"
        )
    return resources


# A resource mapping: ``{CPU: 4, GPU: 1, memory: 17179869184, Custom1: 1}``.
Amounts = Annotated[dict[str, float], AfterValidator(_check_amounts)]
BundleShape = Annotated[Amounts, AfterValidator(_check_bundle)]

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]


class BundleDemand(StrictModel):
    """``count`` pending tasks or actors that each need ``resources``."""

    resources: BundleShape
    count: int = Field(default=1, ge=1)


class PlacementGroupDemand(StrictModel):
    """A placement group waiting to be placed; ``count`` identical groups."""

    strategy: Annotated[Strategy, BeforeValidator(one_of(STRATEGIES, case_insensitive=True))]
    bundles: list[BundleShape] = Field(min_length=1)
    name: str | None = None
    count: int = Field(default=1, ge=1)

    def label(self, index: int) -> str:
        return self.name or f"placement_groups[{index}]"


class Demand(StrictModel):
    """Pending work: bundle shapes with counts, and placement groups (the DEMAND file)."""

    bundles: list[BundleDemand] = Field(default_factory=list)
    placement_groups: list[PlacementGroupDemand] = Field(default_factory=list)

    def is_empty(self) -> bool:
        return not self.bundles and not self.placement_groups

    def resource_names(self) -> set[str]:
        names = {k for b in self.bundles for k in b.resources}
        return names | {k for pg in self.placement_groups for b in pg.bundles for k in b}

    def as_bundles(self, *, strict_spread: bool) -> list[tuple[dict[str, float], int]]:
        """``(shape, count)`` of everything that can be packed as plain bundles: the bundles,
        PACK and SPREAD groups' bundles (best effort: any node will do), and each STRICT_PACK
        group as one bundle, the sum of its bundles. STRICT_SPREAD groups' bundles too when
        ``strict_spread`` (else they are placed apart, one node each)."""
        out = [(b.resources, b.count) for b in self.bundles]
        for pg in self.placement_groups:
            if pg.strategy == "STRICT_PACK":
                out.append((summed(pg.bundles), pg.count))
            elif pg.strategy != "STRICT_SPREAD" or strict_spread:
                out.extend((bundle, pg.count) for bundle in pg.bundles)
        return out


def summed(bundles: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The resources of several bundles together."""
    out: dict[str, float] = {}
    for bundle in bundles:
        for k, v in bundle.items():
            out[k] = out.get(k, 0.0) + v
    return out


_STATES = tuple(state.value for state in INSTANCE_STATES)


class Node(StrictModel):
    """One node of the cluster now (a row of the NODES file).

    ``kind`` says which node is the head; when no row says so, the first node of the head node
    type is taken as the head. ``launch_hash`` is the hash of the launch config the node was
    started with; a node whose hash differs from its type's current one is outdated (left out,
    it counts as current).
    """

    id: str = Field(min_length=1)
    node_type: str
    state: Annotated[InstanceState, BeforeValidator(one_of(_STATES, case_insensitive=True))]
    idle_s: float = Field(default=0.0, ge=0)
    used: Amounts = Field(default_factory=dict)
    kind: Literal["head", "worker"] | None = None
    launch_hash: str | None = None

    def is_busy(self) -> bool:
        """Whether any work runs on it (a busy node is never idle, whatever ``idle_s`` says)."""
        return any(amount >= RESOURCE_UNIT for amount in self.used.values())


def head_ids(nodes: Iterable[Node], head_node_type: str) -> set[str]:
    """The ids of the head: the nodes marked ``kind: head``, else the first of the head type."""
    listed = list(nodes)
    marked = {n.id for n in listed if n.kind == "head"}
    if marked:
        return marked
    first = next((n.id for n in listed if n.node_type == head_node_type and n.kind is None), None)
    return {first} if first is not None else set()


def node_problems(nodes: Sequence[Node]) -> list[tuple[tuple[str | int, ...], str]]:
    """Repeated ids and a second head, each with its path in the NODES list."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    seen: set[str] = set()
    heads = 0
    for i, node in enumerate(nodes):
        if node.id in seen:
            out.append(((i, "id"), f"node id {node.id!r} is listed more than once"))
        seen.add(node.id)
        if node.kind == "head":
            heads += 1
            if heads > 1:
                out.append(((i, "kind"), "a cluster has one head node; another is marked head"))
    return out


class NodeTypeSpec(BaseModel):
    """One node type as the autoscaler packs against it."""

    model_config = ConfigDict(frozen=True)

    resources: dict[str, float]  # filled in from the catalog where the file left them out
    min_workers: int = Field(default=0, ge=0)
    max_workers: int = Field(default=0, ge=0)
    idle_timeout_s: float | None = Field(default=None, ge=0)  # None: the cluster's timeout
    launch_hash: str = ""  # hash of the type's launch config; nodes with another are outdated
    instance_type: str | None = None  # what the provider launches, for the reader
    price_usd_per_hour: float | None = Field(default=None, ge=0)  # catalog's; None: unknown

    def has_gpu(self) -> bool:
        return self.resources.get("GPU", 0.0) > 0


class ClusterSpec(BaseModel):
    """Node types and the cluster-wide limits: everything the decision needs from the file."""

    head_node_type: str
    max_workers: int = Field(ge=0)  # workers of all types together, the head excluded
    upscaling_speed: float = Field(default=1.0, ge=0)
    idle_timeout_s: float = Field(default=300.0, ge=0)
    node_types: dict[str, NodeTypeSpec]


class Plan(BaseModel):
    """What to do now, and why. ``launch`` is in the cluster file's node type order."""

    launch: dict[str, int] = Field(default_factory=dict)
    terminate: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
    # Bundles no node type can ever hold, and bundles that must wait (limits, cool-down, cap).
    unsatisfiable: list[BundleDemand] = Field(default_factory=list)
    waiting: list[BundleDemand] = Field(default_factory=list)
    in_flight_cap: int = 0  # the largest per-type cap: max(5, upscaling_speed x running of it)

    def summary(self) -> dict[str, Any]:
        """``{"launch", "terminate", "reasons"}``: what ``explain --json`` prints."""
        return {"launch": self.launch, "terminate": self.terminate, "reasons": self.reasons}

    def is_empty(self) -> bool:
        return not self.launch and not self.terminate


def format_amount(name: str, amount: float) -> str:
    """``memory`` in GiB for the reader, counts without a needless ``.0``."""
    if name in MEMORY_KEYS:
        return f"{amount / GIB:.4g}GiB"
    return f"{amount:g}"


def format_resources(resources: Mapping[str, float]) -> str:
    """``{CPU: 4, GPU: 1, memory: 16GiB}``."""
    inner = ", ".join(f"{k}: {format_amount(k, v)}" for k, v in resources.items())
    return "{" + inner + "}"


# --------------------------------------------------------------------------- reading files
def demand_from_doc(doc: Document) -> Demand:
    """A DEMAND file (YAML or JSON); an empty file is no demand. Raises ConfigError."""
    if doc.data is None:
        return Demand()
    if not isinstance(doc.data, Mapping):
        raise doc.error((), "expected a mapping with bundles and/or placement_groups")
    return validate_doc(Demand, doc)


def nodes_from_doc(doc: Document) -> list[Node]:
    """A NODES file: a list of nodes, or a mapping whose ``nodes`` key holds that list (so the
    output of ``cluster status --json`` can be fed back). Raises ConfigError with every issue."""
    path: PathKey = ()
    rows: Any = doc.data
    if isinstance(rows, Mapping) and "nodes" in rows:
        path, rows = ("nodes",), rows["nodes"]
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise doc.error(path, "expected a list of nodes: [{id, node_type, state, idle_s, used}]")
    nodes: list[Node] = []
    issues = []
    for i in range(len(rows)):
        try:
            nodes.append(validate_doc(Node, doc, (*path, i)))
        except ConfigError as exc:
            issues.extend(exc.issues)
    if not issues:
        issues = [doc.issue((*path, *where), msg) for where, msg in node_problems(nodes)]
    if issues:
        raise ConfigError(issues)
    return nodes
