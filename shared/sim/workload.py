"""A simulation workload: what arrives during the day, read from a user's file or generated
from a seed.

::

    seed: 11
    machine_pools: {train: pools/train-pool.yaml}   # registered as `corral pools apply` would
    master_config: det/master.yaml                   # a Determined master config (optional)
    clusters: {ray-a: clusters/ray.yaml}             # Ray cluster files (optional)
    budgets: budgets.yaml                            # dollar budgets (optional)
    arrivals:
      - at: 0s                  # when the first one arrives
        every: 10m              # then one more each interval ...
        count: 6                # ... this many in all
        duration: 2h            # a job's run time; without it, a service running to the end
        task: {resources: {accelerators: A100:8, use_spot: true}}   # or task_file: PATH
      - at: 3h
        duration: 1h
        ray: {cluster: ray-a, bundles: [{resources: {GPU: 1}, count: 8}]}
    generate:                   # a seeded day instead: N arrivals drawn from these templates
      requests: 10000
      templates:
        - {weight: 5, duration: 1h, task: {resources: {accelerators: A10G:1}}}

Tasks are task files as users write them (a compute config naming a machine pool makes the
task a workload of that pool; ``resources.resource_pool`` or slots send it to the master
config). Paths are relative to the workload file.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from ..autoscaler.model import BundleDemand
from ..budgets import Budget, check_names, load_budgets
from ..config.base import StrictModel
from ..config.cluster import Cluster
from ..config.compute_config import ComputeConfig
from ..config.detect import check_problems, load_as
from ..config.machine_pool import MachinePool
from ..config.master_config import MasterConfig
from ..config.task import Task
from ..configio import ConfigError, Document, PathKey, load_file, validate_doc
from .scenario import TimeS

DAY_S = 86400.0


class RayDemandSpec(StrictModel):
    """Work for a Ray cluster: bundles that wait until the autoscaler gives them room."""

    cluster: str
    bundles: list[BundleDemand] = Field(min_length=1)


class ArrivalSpec(StrictModel):
    """One arrival, or ``count`` of them ``every`` apart."""

    at_s: TimeS = Field(0.0, alias="at")
    every_s: TimeS | None = Field(None, alias="every")
    count: int = Field(1, ge=1)
    duration_s: TimeS | None = Field(None, alias="duration")
    weight: float = Field(1.0, gt=0)  # a template's share of generated arrivals
    task: dict[str, Any] | None = None
    task_file: str | None = None
    ray: RayDemandSpec | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ArrivalSpec:
        kinds = [k for k in ("task", "task_file", "ray") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of task, task_file or ray")
        return self


class GenerateSpec(StrictModel):
    """A seeded workload: ``requests`` arrivals over the day, from weighted templates."""

    requests: int = Field(ge=1)
    templates: list[ArrivalSpec] = Field(min_length=1)
    peak_hour: float = Field(14.0, ge=0, lt=24)  # arrivals follow a day curve peaking here
    peak_ratio: float = Field(3.0, ge=1)  # the peak's rate over the night's


class StaticPoolSpec(StrictModel):
    """A static allocation (the Determined-like policy): machines held all day."""

    instance_type: str
    cloud: str
    count: int = Field(ge=1)
    zone: str | None = None


class WorkloadFile(StrictModel):
    seed: int = 0
    machine_pools: dict[str, str | dict[str, Any]] = Field(default_factory=dict)
    master_config: str | dict[str, Any] | None = None
    clusters: dict[str, str | dict[str, Any]] = Field(default_factory=dict)
    budgets: str | list[Budget] | None = None
    static_pools: list[StaticPoolSpec] | None = None
    arrivals: list[ArrivalSpec] = Field(default_factory=list)
    generate: GenerateSpec | None = None


@dataclass(frozen=True)
class Arrival:
    """One request of the day, normalized: a task (direct, machine pool or Determined) or a
    Ray cluster's demand, and how long it runs once it has capacity (None: to the end)."""

    id: str
    at_s: float
    duration_s: float | None
    task: Task | None = None
    ray: RayDemandSpec | None = None


@dataclass
class Workload:
    """Everything the simulator replays."""

    seed: int
    arrivals: list[Arrival]
    machine_pools: dict[str, MachinePool]
    master: MasterConfig | None
    clusters: dict[str, Cluster]
    budgets: tuple[Budget, ...]
    static_pools: list[StaticPoolSpec] | None
    templates: list[Arrival]  # what ``--generate`` draws from, with these weights
    weights: list[float]
    fixed: list[Arrival] = field(default_factory=list)  # the file's own arrivals
    # generate's requests, peak hour, peak ratio and day length (None: nothing drawn)
    drawn: tuple[int, float, float, float] | None = None

    def with_seed(self, seed: int) -> Workload:
        """The same workload drawn again with another seed (its listed arrivals kept)."""
        arrivals = list(self.fixed)
        if self.drawn is not None:
            requests, peak_hour, peak_ratio, day_s = self.drawn
            arrivals += generate(
                self.templates, self.weights, requests, seed, day_s, peak_hour, peak_ratio
            )
        arrivals.sort(key=lambda a: (a.at_s, a.id))
        return replace(self, seed=seed, arrivals=arrivals)


def _resolve(doc: Document, ref: str | dict[str, Any], path: PathKey, model: type[Any]) -> Any:
    """A file a workload names (relative to it), or the same given inline."""
    if isinstance(ref, dict):
        sub = Document(doc.name, doc.data, doc.lines, doc.base_dir)
        found = validate_doc(model, sub, path)
        check_problems(found, sub)
        return found
    target = (doc.base_dir or Path(".")) / ref
    if not target.is_file():
        raise doc.error(path, f"no such file {str(target)!r}")
    return load_as(target, model)[0]


def _task(doc: Document, spec: ArrivalSpec, path: PathKey) -> Task:
    base = doc.base_dir or Path(".")
    if spec.task_file is not None:
        task, tdoc = load_as(base / spec.task_file, Task)
        base, where, data = tdoc.base_dir or base, tdoc, dict(tdoc.data)
    else:
        where, data = doc, dict(spec.task or {})
        task = validate_doc(Task, doc, (*path, "task"))
    if isinstance(task.compute_config, str):
        ref = base / task.compute_config
        if not ref.is_file():
            raise where.error((*path, "task", "compute_config"), f"no such file {str(ref)!r}")
        data["compute_config"] = load_file(ref).data
        task = Task.model_validate({**data, "compute_config": load_as(ref, ComputeConfig)[0]})
    return task


def _templates(doc: Document, specs: Sequence[ArrivalSpec], path: PathKey) -> list[Arrival]:
    out = []
    for i, spec in enumerate(specs):
        task = _task(doc, spec, (*path, i)) if spec.ray is None else None
        out.append(Arrival(f"t{i}", spec.at_s, spec.duration_s, task, spec.ray))
    return out


def workload_from_doc(doc: Document) -> Workload:
    """Validate a parsed workload file and everything it names; every mistake with its line."""
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping with arrivals and/or generate")
    spec = validate_doc(WorkloadFile, doc)
    if not spec.arrivals and spec.generate is None:
        raise doc.error((), "expected arrivals, generate, or both")
    pools = {
        name: _resolve(doc, ref, ("machine_pools", name), MachinePool)
        for name, ref in spec.machine_pools.items()
    }
    master = (
        _resolve(doc, spec.master_config, ("master_config",), MasterConfig)
        if spec.master_config is not None
        else None
    )
    clusters = {
        name: _resolve(doc, ref, ("clusters", name), Cluster) for name, ref in spec.clusters.items()
    }
    budgets: tuple[Budget, ...] = ()
    if isinstance(spec.budgets, str):
        target = (doc.base_dir or Path(".")) / spec.budgets
        if not target.is_file():
            raise doc.error(("budgets",), f"no such file {str(target)!r}")
        budgets = load_budgets(target)
    elif spec.budgets is not None:
        check_names(doc, ("budgets",))
        budgets = tuple(spec.budgets)
    _check_ray(doc, spec, clusters)
    arrivals: list[Arrival] = []
    # Each entry's task read at its own path (a one-entry list read every entry's task at
    # the first's: arrivals[0].task for all).
    templates = _templates(doc, spec.arrivals, ("arrivals",))
    for i, (arrival, template) in enumerate(zip(spec.arrivals, templates, strict=True)):
        step = arrival.every_s or 0.0
        arrivals.extend(
            replace(template, id=f"a{i}-{n}", at_s=arrival.at_s + n * step)
            for n in range(arrival.count)
        )
    weights = [a.weight for a in spec.arrivals]
    fixed = list(arrivals)
    drawn = None
    if spec.generate is not None:
        gen = spec.generate
        templates = _templates(doc, gen.templates, ("generate", "templates"))
        weights = [t.weight for t in gen.templates]
        drawn = (gen.requests, gen.peak_hour, gen.peak_ratio, DAY_S)
        arrivals.extend(
            generate(
                templates, weights, gen.requests, spec.seed, DAY_S, gen.peak_hour, gen.peak_ratio
            )
        )
    arrivals.sort(key=lambda a: (a.at_s, a.id))
    return Workload(
        spec.seed,
        arrivals,
        pools,
        master,
        clusters,
        budgets,
        spec.static_pools,
        templates,
        weights,
        fixed,
        drawn,
    )


def _check_ray(doc: Document, spec: WorkloadFile, clusters: Mapping[str, Cluster]) -> None:
    issues = []
    for where, items in (("arrivals", spec.arrivals), ("generate", spec.generate)):
        listed = items if isinstance(items, list) else (items.templates if items else [])
        path: PathKey = (where,) if where == "arrivals" else ("generate", "templates")
        for i, item in enumerate(listed):
            if item.ray is not None and item.ray.cluster not in clusters:
                known = ", ".join(clusters) or "none"
                issues.append(
                    doc.issue(
                        (*path, i, "ray", "cluster"),
                        f"no cluster {item.ray.cluster!r} in clusters (it has {known})",
                    )
                )
    if issues:
        raise ConfigError(issues)


def load_workload(path: str | Path) -> Workload:
    """Read a workload file (:class:`ConfigError` naming file, line and field when wrong)."""
    return workload_from_doc(load_file(path))


def generate(
    templates: Sequence[Arrival],
    weights: Sequence[float],
    requests: int,
    seed: int,
    day_s: float = DAY_S,
    peak_hour: float = 14.0,
    peak_ratio: float = 3.0,
) -> list[Arrival]:
    """``requests`` arrivals over one day, the same for the same seed: times follow a day
    curve (a cosine peaking at ``peak_hour``, ``peak_ratio`` times the night's rate),
    templates are drawn by weight, run times are log-normal around the template's duration
    (services stay services)."""
    rng = random.Random(f"corral-sim/{seed}")
    out = []
    for n in range(requests):
        at_s = _arrival_time(rng, peak_hour, peak_ratio, day_s)
        template = rng.choices(templates, weights)[0]
        duration = template.duration_s
        if duration is not None:
            duration = max(60.0, duration * math.exp(rng.gauss(-0.125, 0.5)))
        out.append(replace(template, id=f"g{n}", at_s=at_s, duration_s=duration))
    return out


def _arrival_time(rng: random.Random, peak_hour: float, peak_ratio: float, day_s: float) -> float:
    """A time of day drawn from the day curve (rejection sampling)."""
    low = 1.0 / peak_ratio
    while True:
        t = rng.random() * day_s
        phase = 2 * math.pi * (t / 3600.0 - peak_hour) / 24.0
        rate = low + (1 - low) * (1 + math.cos(phase)) / 2
        if rng.random() <= rate:
            return t
