"""Machine images as a task names them, SkyPilot's ``resources.image_id``:

- ``image_id: ami-0123...`` (or any one image the cloud understands): every region;
- ``image_id: {us-east-1: ami-0123..., us-west-2: ami-0456...}``: one image per region, and the
  task runs only in the regions named (the planner leaves the others out);
- ``image_id: docker:<image>``: the cloud's default machine image, with setup and run inside
  that container on the node.

What a cloud does with the string is its provider's business (an AMI id or an SSM parameter
path on AWS, an image or a family on Google Cloud); which default it uses when none is named
too. Pure: no cloud is called here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DOCKER_PREFIX = "docker:"


@dataclass(frozen=True, slots=True)
class ImageChoice:
    """The images of one launch: ``machine`` (None: the provider's default) and ``docker``
    (None: setup and run on the machine itself)."""

    machine: str | None = None
    docker: str | None = None


def image_for_region(image_id: str | Mapping[str, str] | None, region: str) -> ImageChoice:
    """The images a launch in ``region`` uses. A per-region mapping without ``region`` is the
    planner's business (it never plans such a region); here it reads as the default."""
    if isinstance(image_id, Mapping):
        image_id = image_id.get(region)
    if not image_id:
        return ImageChoice()
    if image_id.startswith(DOCKER_PREFIX):
        return ImageChoice(docker=image_id[len(DOCKER_PREFIX) :].strip() or None)
    return ImageChoice(machine=image_id)


def image_regions(image_id: str | Mapping[str, str] | None) -> frozenset[str] | None:
    """The regions a task may run in because of its image: those of a per-region mapping,
    or None (any) for one image or none."""
    if isinstance(image_id, Mapping):
        return frozenset(image_id)
    return None
