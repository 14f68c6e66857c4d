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


def job_queue_key(prefix: str, node: str) -> str:
    """The jobs (``corral exec ID task.yaml``) waiting for ``node``, first submitted first:
    its agent takes the next one only when the one before it ended there (shared/jobs.py). A
    sorted set scored by job number: the lowest goes first."""
    return f"{prefix}:jobq:{node}"


# --- sessions: corral attach and port-forward, relayed through the API ----------------------
# A session is an exec of another kind (``shell``: an interactive shell; ``forward``: one TCP
# connection to 127.0.0.1:PORT on the node) with two byte streams beside it, each a Redis list
# of base64 chunks drained as it is read: ``in`` (the user's side to the node) and ``up`` (the
# node's side to the user). An empty entry is the end of its stream.

SESSION_KINDS = ("shell", "forward")
SESSION_CHUNK_BYTES = 64 * 1024  # the most one write carries
SESSION_MAX_PENDING = 256  # chunks waiting in one stream (16 MiB): past it, the writer waits
SESSION_TTL_S = 3600  # a session nobody touched for an hour is forgotten (its node side ends)
SESSION_READ_BATCH = 64  # chunks one read takes at most
SESSION_MAX_WAIT_S = 25.0  # the longest a read waits for data (under common proxies' 30 s)
END_OF_STREAM = ""
RESIZE_PREFIX = "size:"  # an ``in`` entry "size:ROWS:COLS": the user's terminal was resized


def user_sessions_key(prefix: str, user: str) -> str:
    """The sessions a user opened (a sorted set: id -> when), for the per-user limit and to
    end them when the user is revoked."""
    return f"{prefix}:sessions:user:{user}"


def session_stream_key(prefix: str, exec_id: str, side: str) -> str:
    """One direction of a session: ``in`` (user to node) or ``up`` (node to user)."""
    if side not in ("in", "up"):
        raise ValueError(f"a session stream is 'in' or 'up', not {side!r}")
    return f"{prefix}:exec:{exec_id}:{side}"
