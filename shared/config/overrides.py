"""Command-line overrides of a task file, merged as SkyPilot's ``sky launch`` merges them.

``corral launch`` and ``corral plan`` take SkyPilot's flags (``--env``, ``--secret``,
``--gpus``, ``--infra``/``--cloud``/``--region``/``--zone``, ``--num-nodes``, ``--use-spot``)
and lay them over the file before it is checked, so a flag's mistake is reported like the
file's own (and exit 2). The rules, from SkyPilot's CLI (``sky/client/cli/command.py`` and its
``tests/unit_tests/test_cli_secrets.py``):

- ``--env`` and ``--secret`` add to the file's ``envs`` / ``secrets`` and win over them; the two
  are kept apart (a name may be in both; on the machine the secret's value wins).
- A resource override applies to **every** candidate of the task: the base ``resources`` and
  each entry of ``any_of`` / ``ordered``, as SkyPilot copies each of a task's resources with
  the overrides. ``--gpus none`` takes the accelerators away.
- ``--infra`` sets cloud, region and zone together (a part it leaves out is left open);
  ``--cloud``, ``--region`` and ``--zone`` set one part each; ``--infra`` with any of the three
  is refused, as SkyPilot refuses it.

Pure: no environment is read here. ``--env NAME`` / ``--secret NAME`` take the caller's value
in the CLI, which passes it in.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any

from corral.shared.config.task import split_infra

LOCATION = ("cloud", "region", "zone")
CANDIDATE_LISTS = ("any_of", "ordered")


class OverrideError(ValueError):
    """A flag that cannot be applied; the message names the flag."""


@dataclass(frozen=True)
class Overrides:
    """What the command line lays over a task file (None / empty: the file's own)."""

    envs: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    gpus: str | None = None  # "L4:1", "A100" or "none"
    infra: str | None = None
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    num_nodes: int | None = None
    use_spot: bool | None = None

    def resources(self) -> dict[str, Any]:
        """The resource fields to set on every candidate (``accelerators: None`` clears)."""
        if self.infra is not None and any(getattr(self, part) for part in LOCATION):
            raise OverrideError("give either --infra or --cloud/--region/--zone, not both")
        fields: dict[str, Any] = {}
        if self.gpus is not None:
            fields["accelerators"] = None if self.gpus.lower() == "none" else self.gpus
        if self.use_spot is not None:
            fields["use_spot"] = self.use_spot
        if self.infra is not None:
            try:
                parts = split_infra(self.infra)
            except ValueError as exc:
                raise OverrideError(f"--infra: {exc}") from None
            fields.update(zip(LOCATION, parts, strict=True))
        for part in LOCATION:
            value = getattr(self, part)
            if value is not None:
                fields[part] = None if value.lower() == "none" else value
        return fields

    def describe(self) -> list[str]:
        """The flags given, as ``plan`` shows them; secrets' values never appear."""
        said = [f"--env {k}={v}" for k, v in self.envs.items()]
        said += [f"--secret {k}=<hidden>" for k in self.secrets]
        named = {
            "gpus": self.gpus,
            "infra": self.infra,
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "num-nodes": self.num_nodes,
        }
        said += [f"--{flag} {value}" for flag, value in named.items() if value is not None]
        if self.use_spot is not None:
            said.append("--use-spot" if self.use_spot else "--no-use-spot")
        return said


def apply_overrides(data: dict[str, Any], overrides: Overrides) -> dict[str, Any]:
    """A copy of the task mapping ``data`` with ``overrides`` merged in (the input is not
    changed); raises OverrideError for flags that cannot go together."""
    task = copy.deepcopy(data)
    if overrides.envs:
        task["envs"] = {**(task.get("envs") or {}), **overrides.envs}
    if overrides.secrets:
        task["secrets"] = {**secrets_of(task.get("secrets")), **overrides.secrets}
    if overrides.num_nodes is not None:
        task["num_nodes"] = overrides.num_nodes
    fields = overrides.resources()
    if fields:
        resources = task.get("resources")
        resources = dict(resources) if isinstance(resources, dict) else {}
        _set(resources, fields)
        for name in CANDIDATE_LISTS:
            entries = resources.get(name)
            if isinstance(entries, list):
                resources[name] = [_set(dict(e), fields) if isinstance(e, dict) else e
                                   for e in entries]  # fmt: skip
        task["resources"] = resources
    return task


def secrets_of(value: Any) -> dict[str, Any]:
    """A task's ``secrets`` as a mapping: SkyPilot's mapping as it is, a list of names as
    names without values (None)."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return {str(name): None for name in value}
    return {}


def _set(resources: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """Set ``fields`` on one candidate. A location part given replaces that part; the
    candidate's ``infra`` is first spelled as its three parts so the two never clash."""
    if any(part in fields for part in LOCATION) and "infra" in resources:
        infra = resources.pop("infra")
        # A malformed infra is the file's own mistake, reported when the file is checked.
        with contextlib.suppress(ValueError):
            resources.update(zip(LOCATION, split_infra(str(infra)), strict=True))
    for name, value in fields.items():
        if value is None:
            resources.pop(name, None)
        else:
            resources[name] = value
    return resources
