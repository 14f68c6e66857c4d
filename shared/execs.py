"""Commands run on a machine after it is up (``corral exec``): where they wait and what they
say, as Redis keys every party spells the same way. Pure.

A command is queued for one node (``execq:<node>``); the node's agent takes it on its next
beat, runs it in the task's workdir with the task's environment, appends its output
(``exec:<id>:out``, at most :data:`MAX_OUTPUT_BYTES`) and records its exit code
(``exec:<id>``). The API reads both for the caller.
"""

from __future__ import annotations

MAX_OUTPUT_BYTES = 8 * 1024 * 1024
MAX_COMMAND_BYTES = 64 * 1024
EXEC_TTL_S = 24 * 3600


def exec_key(prefix: str, exec_id: str) -> str:
    return f"{prefix}:exec:{exec_id}"


def exec_output_key(prefix: str, exec_id: str) -> str:
    return f"{prefix}:exec:{exec_id}:out"


def exec_queue_key(prefix: str, node: str) -> str:
    """The commands waiting for ``node``: a local machine's instance id (li-...), or a cloud
    node's name in the node book (``cloud:attempt:rank``)."""
    return f"{prefix}:execq:{node}"
