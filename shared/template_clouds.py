"""Which cloud a machine pool's launch templates are written for, read from the templates
themselves: what makes the seed's Google Cloud pool Google Cloud's although its instance type
(``a2-highgpu-8g``) is also a local-cloud alias.

A template is written for a cloud when

- its ``advanced_instance_config`` has that cloud's shape: EC2's RunInstances parameters are
  PascalCase (``CapacityReservationSpecification``, ``BlockDeviceMappings``); Compute Engine's
  instance fields are camelCase or snake_case (``instanceProperties``, ``reservationAffinity``,
  ``labels``); a Kubernetes pod patch has ``metadata`` or ``spec``;
- or else its instance type is in exactly one cloud's shipped catalog.

A template with neither (no config and a name in no catalog or in several) says nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .catalog import load_catalog
from .clouds import CATALOG_CLOUDS

_KUBE_KEYS = frozenset({"metadata", "spec", "apiVersion", "kind"})


def config_shape(config: Mapping[str, Any]) -> str | None:
    """The cloud an ``advanced_instance_config`` is written for, or None (empty, or mixed)."""
    keys = [k for k in config if isinstance(k, str) and k]
    if not keys:
        return None
    if all(k in _KUBE_KEYS for k in keys):
        return "kubernetes"
    if all(k[0].isupper() for k in keys):
        return "aws"
    if all(k[0].islower() for k in keys):
        return "gcp"
    return None


def type_clouds(instance_type: str) -> tuple[str, ...]:
    """The catalog clouds whose shipped catalog lists the instance type."""
    catalog = load_catalog()
    return tuple(c for c in CATALOG_CLOUDS if catalog.instance_type(c, instance_type))


@dataclass(frozen=True)
class TemplateCloud:
    """What one template says of its cloud: the cloud (None: nothing) and why."""

    cloud: str | None
    why: str


def template_cloud(instance_type: str, config: Mapping[str, Any]) -> TemplateCloud:
    """The cloud one launch template is written for (see the module docstring)."""
    shape = config_shape(config)
    if shape is not None:
        keys = ", ".join(sorted(config)[:2])
        return TemplateCloud(shape, f"its advanced_instance_config ({keys}) is {shape}'s")
    clouds = type_clouds(instance_type)
    if len(clouds) == 1:
        return TemplateCloud(clouds[0], f"{instance_type} is in the {clouds[0]} catalog only")
    return TemplateCloud(None, f"{instance_type} names no one cloud")


def written_for(templates: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[set[str], str]:
    """The clouds a pool's templates (instance type, advanced_instance_config) are written
    for, and the first reason given for each."""
    clouds: dict[str, str] = {}
    for instance_type, config in templates:
        found = template_cloud(instance_type, config)
        if found.cloud is not None:
            clouds.setdefault(found.cloud, found.why)
    return set(clouds), "; ".join(f"{why}" for why in clouds.values())
