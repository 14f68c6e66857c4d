"""Code and data a task takes to its nodes: SkyPilot's ``workdir`` and ``file_mounts``.

``corral launch`` packs the local ``workdir`` folder and each local ``file_mounts`` source into
one gzip'd tar, content-addressed by its sha256, and uploads it once per project (``PUT
/v1/bundles/{sha256}``). The task then carries a :class:`Bundle`: which members go where. On
the node, the agent fetches the bundle (a cloud machine with its node token; the local cloud
from the machine's own folder), checks the sha256, and unpacks: the workdir to
:data:`NODE_WORKDIR`, where ``setup`` and ``run`` start, each mount to its target. A git
``workdir`` (``{url, ref}``) is cloned on the node instead. Pure: the model and its rules.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_MAX_BUNDLE_BYTES = 16 * 1024 * 1024  # gzip'd; CORRAL_BUNDLE_MAX_BYTES changes it
NODE_WORKDIR = "~/sky_workdir"  # SkyPilot's place for the workdir on a node
WORKDIR_MEMBER = "workdir"
MAX_MOUNTS = 256
_SHA256 = r"^[0-9a-f]{64}$"


def check_target(target: str) -> str:
    """A mount's target (``/data``, ``~/data``, or relative: ``data``, ``./data``) as the node
    reads it; ValueError naming the rule. A relative target is under the node's workdir,
    ``~/sky_workdir/data``: SkyPilot's meaning (its ``examples/using_file_mounts.yaml``:
    "Relative paths are under ~/sky_workdir/ — the remote workdir")."""
    if not isinstance(target, str) or not target.strip():
        raise ValueError("a file_mounts target must be a path")
    if len(target) > 4096:
        raise ValueError("a file_mounts target is at most 4096 characters")
    if ".." in target.split("/"):
        raise ValueError(f"a file_mounts target may not climb with '..'; got {target!r}")
    if target.startswith("/") or target == "~" or target.startswith("~/"):
        return target
    relative = target.removeprefix("./").strip("/")
    return f"{NODE_WORKDIR}/{relative}" if relative not in ("", ".") else NODE_WORKDIR


class BundleMount(BaseModel):
    """One file_mounts entry packed into the bundle: member ``member`` goes to ``target``."""

    model_config = ConfigDict(extra="forbid")

    target: str
    member: str = Field(pattern=r"^mounts/\d+$")
    is_dir: bool

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return check_target(value)


class Bundle(BaseModel):
    """What a task's bundle holds, written by ``corral launch`` (not by hand)."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern=_SHA256)
    size_bytes: int = Field(ge=0)
    workdir: bool = False  # the member ``workdir/`` is the task's workdir
    mounts: list[BundleMount] = Field(default_factory=list, max_length=MAX_MOUNTS)


# --- sources the node copies itself (docs/cli.md, "Code and data on the nodes") -------------
NODE_COPIED_SCHEMES = ("s3",)  # copied on the node with its own credentials (boto3)
UNSUPPORTED_SCHEMES = ("gs", "r2", "cos", "oci", "https", "http")


def remote_source_problem(source: object) -> str | None:
    """Why a file_mounts source cannot be used (a storage mapping, a store not supported
    yet, an s3:// URL without a bucket), or None: a local path or an s3:// URL."""
    if not isinstance(source, str):
        return "a storage mapping (mode: MOUNT or COPY) is not supported yet; give a path or s3://"
    if "://" not in source:
        return None
    scheme, rest = source.split("://", 1)
    if scheme not in NODE_COPIED_SCHEMES:
        return f"{scheme}:// sources are not supported yet; give a local path or s3://"
    if not rest.split("/", 1)[0]:
        return f"expected s3://BUCKET[/KEY], got {source!r}"
    return None


def node_copied(file_mounts: dict[str, object] | None) -> list[dict[str, str]]:
    """The file_mounts the node copies itself (s3://), as ``{target, source}``, sorted."""
    return [
        {"target": target, "source": source}
        for target, source in sorted((file_mounts or {}).items())
        if isinstance(source, str)
        and source.split("://", 1)[0] in NODE_COPIED_SCHEMES
        and "://" in source
    ]
