"""A task's ports (SkyPilot's ``resources.ports``) and the endpoints a running request shows.

``ports: 8080``, ``ports: "8080"``, ``ports: "10000-10010"`` or a list of those. Each becomes a
(first, last) range of TCP ports; the cloud opens them (a security-group rule, a firewall
rule, nothing on the local cloud whose machines share this host's network) and the request's
view names ``address:port`` on its head node. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_RANGES = 64  # more port ranges than a security group comfortably holds per rule set

PortRange = tuple[int, int]


def parse_ports(value: Any) -> list[PortRange]:
    """The ranges ``value`` names, merged and sorted; ValueError names what is wrong."""
    items = value if isinstance(value, list) else [] if value is None else [value]
    if len(items) > MAX_RANGES:
        raise ValueError(f"at most {MAX_RANGES} ports or port ranges, got {len(items)}")
    ranges: list[PortRange] = []
    for item in items:
        text = str(item).strip()
        first, sep, last = text.partition("-")
        if not _number(first) or (sep and not _number(last)):
            raise ValueError(f"expected a port (8080) or a range (10000-10010), got {item!r}")
        lo, hi = int(first), int(last) if sep else int(first)
        if not 1 <= lo <= hi <= 65535:
            raise ValueError(f"ports run from 1 to 65535, low to high; got {item!r}")
        ranges.append((lo, hi))
    merged: list[PortRange] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5


def port_text(r: PortRange) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}-{r[1]}"


def endpoints(address: str | None, ranges: Sequence[PortRange]) -> list[str]:
    """``address:port`` (or ``address:first-last``) for each range; none without an address."""
    if not address:
        return []
    host = f"[{address}]" if ":" in address else address
    return [f"{host}:{port_text(r)}" for r in ranges]
