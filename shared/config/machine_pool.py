"""An Anyscale machine pool file: machine types, their launch templates and partitions.

::

    kind: ANYSCALE_MANAGED
    machine_types:
      - machine_type: reserved-a100
        launch_templates:
          - {instance_type: p4de.24xlarge, market_type: ON_DEMAND, advanced_instance_config: {...}}
        partitions:
          - name: any
            size: 2
            rules: [{selector: "workload-type in (job,service)", priority: 10, quota: 1}]

A rule's ``selector`` is a label map (every label must match) or a Kubernetes-style selector
string (``workload-type in (job,service)``, ``project!=dev``, ``team``, ``!preview``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from ..configio import PathKey
from . import DurationS, one_of
from .base import StrictModel

PoolKind = Literal["ANYSCALE_MANAGED", "CUSTOMER_MANAGED"]
MarketType = Literal["ON_DEMAND", "SPOT"]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET_TERM = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_CMP_TERM = re.compile(rf"^({_KEY})\s*(==|!=|=)\s*({_VALUE})$")
_EXISTS_TERM = re.compile(rf"^(!?)\s*({_KEY})$")
_SELECTOR_HINT = "expected a selector like 'workload-type in (job,service)' or 'project=ml'"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One term of a selector: ``key op values`` (op: in, notin, exists, !exists)."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a workload with these labels meets this term."""
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # notin: a missing label also passes


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses: ``a in (x,y),b`` -> ``["a in (x,y)", "b"]``."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:i].strip())
            start = i + 1
    terms.append(text[start:].strip())
    return terms


def _parse_term(term: str) -> Requirement:
    if match := _SET_TERM.match(term):
        values = frozenset(v.strip() for v in match.group(3).split(",") if v.strip())
        if not values:
            raise ValueError(f"{_SELECTOR_HINT}: empty value list in {term!r}")
        return Requirement(match.group(1), match.group(2), values)
    if match := _CMP_TERM.match(term):
        op = "notin" if match.group(2) == "!=" else "in"
        return Requirement(match.group(1), op, frozenset({match.group(3)}))
    if match := _EXISTS_TERM.match(term):
        return Requirement(match.group(2), "!exists" if match.group(1) else "exists")
    raise ValueError(f"{_SELECTOR_HINT}; cannot read {term!r}")


def parse_selector(selector: str | dict[str, str]) -> tuple[Requirement, ...]:
    """A selector string or label map -> its terms (all must hold). ValueError if unreadable."""
    if isinstance(selector, dict):
        return tuple(Requirement(k, "in", frozenset({v})) for k, v in selector.items())
    if not selector.strip():
        return ()  # an empty selector matches every workload, as in Kubernetes
    return tuple(_parse_term(term) for term in _split_terms(selector.strip()))


def _selector(value: object) -> object:
    if isinstance(value, dict):
        # YAML reads `tier: 1` as a number; labels are text.
        value = {str(k): v if isinstance(v, str) else str(v).lower() for k, v in value.items()}
    if isinstance(value, str | dict):
        parse_selector(value)
        return value
    raise ValueError(f"{_SELECTOR_HINT}, or a label map; got {value!r}")


class Rule(StrictModel):
    """Who may use a partition: first matching rule wins; priority 0 or quota 0 shuts out."""

    selector: Annotated[str | dict[str, str], BeforeValidator(_selector)]
    priority: int | None = Field(None, ge=0)  # higher wins; 0 means "may not use"
    quota: int | None = Field(None, ge=0)  # machines at most; None is unlimited

    def requirements(self) -> tuple[Requirement, ...]:
        """The selector's terms."""
        return parse_selector(self.selector)

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a workload with these labels falls under this rule."""
        return all(r.matches(labels) for r in self.requirements())


class Partition(StrictModel):
    """A share of a machine type: at most ``size`` machines, used per its rules."""

    name: str
    size: int = Field(ge=0)
    rules: list[Rule] = Field(default_factory=list)


class LaunchTemplate(StrictModel):
    """One way to launch the machine type; all of a type's templates are interchangeable."""

    instance_type: str
    market_type: Annotated[MarketType, BeforeValidator(one_of(MarketType))] = "ON_DEMAND"
    advanced_instance_config: dict[str, Any] = Field(default_factory=dict)  # the cloud's own
    zones: list[str] | None = None


class RecyclePolicy(StrictModel):
    """When a pooled VM is replaced by a fresh one."""

    max_workloads: int | None = Field(None, ge=1)
    rotation_interval_s: DurationS | None = Field(None, alias="rotation_interval", ge=0)
    max_idle_duration_s: DurationS | None = Field(None, alias="max_idle_duration", ge=0)


class MachineType(StrictModel):
    """A named kind of machine in the pool (e.g. ``1xA100-80G``) and how it is shared."""

    machine_type: str
    launch_templates: list[LaunchTemplate] = Field(default_factory=list)
    recycle_policy: RecyclePolicy | None = None
    partitions: list[Partition]

    def size(self) -> int:
        """Machines at most, over all partitions."""
        return sum(p.size for p in self.partitions)


class MachinePool(StrictModel):
    """A machine pool file (``anyscale machine-pool``'s spec)."""

    kind: Annotated[PoolKind, BeforeValidator(one_of(PoolKind))]
    machine_types: list[MachineType] = Field(default_factory=list)

    @field_validator("machine_types")
    @classmethod
    def _unique_types(cls, value: list[MachineType]) -> list[MachineType]:
        seen: set[str] = set()
        for machine in value:
            if machine.machine_type in seen:
                raise ValueError(f"machine_type {machine.machine_type!r} is defined twice")
            seen.add(machine.machine_type)
        return value

    def problems(self) -> list[tuple[PathKey, str]]:
        """Cross-field mistakes, each with the path of the value at fault."""
        out: list[tuple[PathKey, str]] = []
        if self.kind == "ANYSCALE_MANAGED" and not self.machine_types:
            out.append((("kind",), "an ANYSCALE_MANAGED pool needs machine_types"))
        for i, machine in enumerate(self.machine_types):
            if self.kind == "ANYSCALE_MANAGED" and not machine.launch_templates:
                out.append(
                    (
                        ("machine_types", i),
                        "an ANYSCALE_MANAGED machine type needs launch_templates",
                    )
                )
            names = [p.name for p in machine.partitions]
            for j, name in enumerate(names):
                if name in names[:j]:
                    out.append(
                        (
                            ("machine_types", i, "partitions", j, "name"),
                            f"partition {name!r} is defined twice in {machine.machine_type!r}",
                        )
                    )
        return out

    def machine(self, name: str) -> MachineType | None:
        """The machine type of that name, if any."""
        return next((m for m in self.machine_types if m.machine_type == name), None)
