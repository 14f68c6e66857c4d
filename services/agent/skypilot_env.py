"""SkyPilot's runtime environment, as a SkyPilot task expects to find it on its nodes.

SkyPilot documents these names and formats in ``docs/source/running-jobs/
environment-variables.rst`` (the tables "Environment variables for setup" and "... for run")
and names them in ``sky/skylet/constants.py``; Corral sets them beside its own ``CORRAL_*``
names, in setup and in run, so SkyPilot's distributed examples (``torchrun
--node_rank=$SKYPILOT_NODE_RANK --master_addr=$(echo "$SKYPILOT_NODE_IPS" | head -n1)``) run
unchanged:

=================================  ==========================================================
``SKYPILOT_NODE_RANK``             this node's rank, ``0`` .. ``num_nodes - 1`` (the head is 0)
``SKYPILOT_NODE_IPS``              every node's IP, one per line, in rank order (head first)
``SKYPILOT_NUM_NODES``             how many nodes (the lines of ``SKYPILOT_NODE_IPS``)
``SKYPILOT_NUM_GPUS_PER_NODE``     the accelerator count per node (0 without)
``SKYPILOT_TASK_ID``               ``sky-<%Y-%m-%d-%H-%M-%S-%f>_<cluster>_<task>``
``SKYPILOT_CLUSTER_INFO``          JSON ``{"cluster_name", "cloud", "region", "zone"}``
=================================  ==========================================================

Setup also gets SkyPilot's setup-stage spellings (``SKYPILOT_SETUP_NODE_RANK``,
``SKYPILOT_SETUP_NODE_IPS``, ``SKYPILOT_SETUP_NUM_GPUS_PER_NODE``); Corral gives both stages
both, with the same values (its setup and run always run on the same nodes).

The launch-wide values (:func:`launch_envs`) are written when a launch is specified; the
node's own (:func:`node_envs`: its rank and its peers' addresses) by its agent, once every
node's address is known. Standard library only: the agent imports it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

NODE_RANK = "SKYPILOT_NODE_RANK"
NODE_IPS = "SKYPILOT_NODE_IPS"
NUM_NODES = "SKYPILOT_NUM_NODES"
NUM_GPUS_PER_NODE = "SKYPILOT_NUM_GPUS_PER_NODE"
TASK_ID = "SKYPILOT_TASK_ID"
CLUSTER_INFO = "SKYPILOT_CLUSTER_INFO"
SETUP_NODE_RANK = "SKYPILOT_SETUP_NODE_RANK"
SETUP_NODE_IPS = "SKYPILOT_SETUP_NODE_IPS"
SETUP_NUM_GPUS_PER_NODE = "SKYPILOT_SETUP_NUM_GPUS_PER_NODE"


def task_id(created_at: float, cluster: str, task: int = 1) -> str:
    """SkyPilot's task id, ``sky-2023-07-06-21-18-31-563597_myclus_1``: the launch's time (UTC,
    to the microsecond), the cluster's name and the task's number on it. Corral's cluster is
    the request, so a request relaunched after a loss keeps its id (as a SkyPilot managed job's
    recoveries keep theirs)."""
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(created_at))
    micros = round((created_at % 1) * 1_000_000) % 1_000_000
    return f"sky-{stamp}-{micros:06d}_{cluster}_{task}"


def cluster_info(cluster: str, cloud: str, region: str | None, zone: str | None) -> str:
    """``SKYPILOT_CLUSTER_INFO``: the JSON SkyPilot documents, ``{"cluster_name": ...,
    "cloud": "GCP", "region": "us-central1", "zone": "us-central1-a"}`` (``cloud`` as SkyPilot
    writes its clouds' names: AWS, GCP, Kubernetes)."""
    return json.dumps({"cluster_name": cluster, "cloud": cloud, "region": region, "zone": zone})


def launch_envs(
    *,
    cluster: str,
    created_at: float,
    cloud: str,
    region: str | None,
    zone: str | None,
    num_nodes: int,
    gpus_per_node: int,
) -> dict[str, str]:
    """The values every node of one launch shares."""
    gpus = str(max(0, gpus_per_node))
    return {
        NUM_NODES: str(num_nodes),
        NUM_GPUS_PER_NODE: gpus,
        SETUP_NUM_GPUS_PER_NODE: gpus,
        TASK_ID: task_id(created_at, cluster),
        CLUSTER_INFO: cluster_info(cluster, cloud, region, zone),
    }


def node_envs(rank: int, ips: Sequence[str]) -> dict[str, str]:
    """A node's own values: its rank and every node's IP, one per line, head (rank 0) first."""
    if not 0 <= rank < len(ips):
        raise ValueError(f"rank {rank} is not one of {len(ips)} node(s)")
    lines = "\n".join(ips)
    return {
        NODE_RANK: str(rank),
        SETUP_NODE_RANK: str(rank),
        NODE_IPS: lines,
        SETUP_NODE_IPS: lines,
        NUM_NODES: str(len(ips)),
    }


def boot_exports(rank: str | None, count: int) -> list[str]:
    """Bash lines for a boot script that runs setup and run itself, with no agent (a cloud
    without ``CORRAL_NODE_API_URL``): no agent asks for the peers' addresses, so only what the
    machine knows alone: its rank where the script is written per node, and for a launch of
    one its own first address (``hostname -I``). A multi-node launch needs the node agents."""
    lines = []
    if rank is not None:
        lines += [f"export {NODE_RANK}={rank}", f"export {SETUP_NODE_RANK}={rank}"]
    if count == 1:
        lines += [
            f'export {NODE_IPS}="$(hostname -I 2>/dev/null | cut -d" " -f1)"',
            f'export {SETUP_NODE_IPS}="${NODE_IPS}"',
        ]
    return lines
