"""``corral check`` for the local cloud: it needs no credentials; its file must read."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING

from corral.services.providers.base import CloudCheck

if TYPE_CHECKING:
    from corral.shared.config.localcloud import LocalCloud


def check(cloud: LocalCloud) -> CloudCheck:
    """The local cloud's machines are processes of this machine's user; its file must read."""
    offerings = cloud.offerings()
    types = len({o.instance_type for o in offerings})
    zones = len({o.zone for o in offerings})
    return CloudCheck(
        True, f"processes of {getpass.getuser()} on this machine", f"{types} types in {zones} zones"
    )
