"""A Determined provider's fields that Corral acts on otherwise, with what it does instead.

Every other provider field is honoured (:mod:`corral.shared.det_providers`); the classes of
all of them are in :mod:`corral.shared.config.compat.determined`, which gives these notices.
"""

from __future__ import annotations

_AGENT_IMAGE = (
    "Corral runs no Determined agent container: its own node agent runs on the machine, and a "
    "task's image is its own resources.image_id"
)
_LOGS = "Corral keeps each machine's and task's output itself (corral logs); no log driver is set"
PROVIDER_OTHERWISE: dict[str, str] = {
    "master_url": "agents report to Corral's API (CORRAL_NODE_API_URL), not to this address",
    "master_cert_name": "agents report to Corral's API, with Corral's own node tokens",
    "startup_script": "not run: Corral's node agent is the machine's boot script; put the "
    "commands in the task's setup",
    "container_startup_script": "not run: there is no agent container; put the commands in "
    "the task's setup",
    "agent_docker_image": _AGENT_IMAGE,
    "agent_docker_network": _AGENT_IMAGE,
    "agent_docker_runtime": _AGENT_IMAGE,
    "agent_fluent_image": _AGENT_IMAGE,
    "agent_config_file_contents": _AGENT_IMAGE,
    "agent_reconnect_attempts": "Corral's node agents reconnect to the API on their own timers",
    "agent_reconnect_backoff": "Corral's node agents reconnect to the API on their own timers",
    "launch_error_timeout": "a failed agent launch is tried again by the pool's next pass",
    "launch_error_retries": "a failed agent launch is tried again by the pool's next pass",
    "log_group": _LOGS,
    "log_stream": _LOGS,
    "use_cloud_logging": _LOGS,
    "name_prefix": "instance names are Corral's own (corral-...), found again by its labels",
    "operation_timeout_period": "Corral waits on Compute Engine's operations by its own timers",
}
