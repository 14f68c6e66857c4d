"""SkyPilot's launch flags, shared by ``corral launch`` and ``corral plan``: parsed here, merged
over the task file by ``corral.shared.config.overrides``.

``--env NAME`` and ``--secret NAME`` without ``=VALUE`` take the value from the environment of
the shell that runs the command, as SkyPilot does: that is what the flag means, not a Corral
setting (settings are read in ``corral.services.settings`` alone).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from corral.shared.config.overrides import Overrides

ENV_HELP = "Set an environment variable, NAME=VALUE or NAME (from this shell); repeatable."
SECRET_HELP = (
    "Set a secret (an environment variable whose value is never shown), NAME=VALUE or NAME "
    "(from this shell); repeatable."
)


class FlagError(ValueError):
    """A flag's value that cannot be read; the message names the flag."""


def pair(flag: str, text: str) -> tuple[str, str]:
    """``NAME=VALUE`` -> (NAME, VALUE), split at the first ``=``; ``NAME`` -> its value in
    this shell's environment (SkyPilot's ``--env`` / ``--secret``)."""
    name, sep, value = text.partition("=")
    if not name:
        raise FlagError(f"{flag}: expected NAME=VALUE or NAME, got {text!r}")
    if sep:
        return name, value
    found = os.environ.get(name)
    if found is None:
        raise FlagError(f"{flag} {name}: {name} is not set in this shell's environment")
    return name, found


@dataclass(frozen=True)
class LaunchFlags:
    """The flags as typer read them."""

    env: list[str] | None = None
    secret: list[str] | None = None
    gpus: str | None = None
    infra: str | None = None
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    num_nodes: int | None = None
    use_spot: bool | None = None

    def overrides(self) -> Overrides:
        """The flags as the merge takes them; raises FlagError."""
        from corral.shared.config.overrides import Overrides

        return Overrides(
            envs=dict(pair("--env", e) for e in self.env or ()),
            secrets=dict(pair("--secret", s) for s in self.secret or ()),
            gpus=self.gpus,
            infra=self.infra,
            cloud=self.cloud,
            region=self.region,
            zone=self.zone,
            num_nodes=self.num_nodes,
            use_spot=self.use_spot,
        )


def merged(data: dict[str, Any], flags: LaunchFlags) -> tuple[dict[str, Any], list[str]]:
    """The task mapping with the flags merged in, and the flags as ``plan`` lists them;
    raises FlagError (or the merge's OverrideError, a ValueError too)."""
    from corral.shared.config.overrides import apply_overrides

    overrides = flags.overrides()
    return apply_overrides(data, overrides), overrides.describe()


EnvOpt = typer.Option(None, "--env", metavar="NAME[=VALUE]", help=ENV_HELP)
SecretOpt = typer.Option(None, "--secret", metavar="NAME[=VALUE]", help=SECRET_HELP)
GpusOpt = typer.Option(
    None, "--gpus", metavar="GPU[:N]", help="Accelerators for every candidate (L4:1; none)."
)
InfraOpt = typer.Option(
    None, "--infra", metavar="CLOUD[/REGION[/ZONE]]", help="Where to run (aws/us-east-1)."
)
CloudOpt = typer.Option(None, "--cloud", help="The cloud to run on (or use --infra).")
RegionOpt = typer.Option(None, "--region", help="The region to run in.")
ZoneOpt = typer.Option(None, "--zone", help="The zone to run in.")
NumNodesOpt = typer.Option(None, "--num-nodes", min=1, help="How many nodes (the head included).")
UseSpotOpt = typer.Option(
    None, "--use-spot/--no-use-spot", help="Spot machines (or on-demand) for every candidate."
)
