"""Corral's Python client: what the ``corral`` command itself uses to talk to the API.

::

    from corral.services.client import Client, InvalidTask, WaitTimeout

    with Client.from_settings() as corral:          # CORRAL_API_URL / CORRAL_API_TOKEN
        request = corral.launch({"resources": {"cloud": "local", "cpus": 2}, "run": "echo hi"})
        request = corral.wait(request.id, timeout_s=120)  # RUNNING, or ended
        for piece in corral.follow_logs(request.id):
            print(piece, end="")

Every method returns a typed view (:mod:`corral.services.client.views`: pydantic models that
keep fields they do not declare) and raises the exceptions of
:mod:`corral.services.client.errors`, the ones the CLI maps to its exit codes.

It lives under ``corral.services`` because ``corral`` is one package whose subpackages are the
repository's top-level folders; a top-level ``corral.client`` would need a folder of its own
beside shared/, services/ and workers/, or the same files under two names (two copies of every
class, so an ``except`` of one would miss the other's errors).
"""

from corral.services.client.errors import (
    ApiError,
    ApiUnreachable,
    ClientError,
    Conflict,
    Impossible,
    InvalidTask,
    NoApiAddress,
    NotFound,
    Unauthorized,
    WaitTimeout,
)
from corral.services.client.rest import Client
from corral.services.client.views import (
    ENDED_STATES,
    AttemptView,
    ClusterDown,
    ClusterNodeView,
    ClusterSummary,
    ClusterView,
    EventPage,
    EventView,
    Health,
    InstanceRow,
    InstanceView,
    PoolDeleted,
    PoolView,
    ProjectView,
    RequestView,
    RunView,
    SubmissionView,
    UserView,
    WhyView,
)

__all__ = [
    "ENDED_STATES",
    "ApiError",
    "ApiUnreachable",
    "AttemptView",
    "Client",
    "ClientError",
    "ClusterDown",
    "ClusterNodeView",
    "ClusterSummary",
    "ClusterView",
    "Conflict",
    "EventPage",
    "EventView",
    "Health",
    "Impossible",
    "InstanceRow",
    "InstanceView",
    "InvalidTask",
    "NoApiAddress",
    "NotFound",
    "PoolDeleted",
    "PoolView",
    "ProjectView",
    "RequestView",
    "RunView",
    "SubmissionView",
    "Unauthorized",
    "UserView",
    "WaitTimeout",
    "WhyView",
]
