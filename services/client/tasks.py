"""A task file read here, as the API is to be sent it.

The API cannot read the caller's files, so a ``compute_config`` given as a path (relative to
the task file) is read, checked and sent inline, as the file writes it. Checking here first
means a mistake names the caller's own file and line, even without a running API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TaskFile:
    """A task file's content as the mapping to send, and notices about what Corral ignores
    in it (fields read as written but without effect here)."""

    data: dict[str, Any]
    notices: list[str] = field(default_factory=list)


def read_task_file(path: Path) -> TaskFile:
    """Read and check the task file at ``path`` (and its compute config file, if it names
    one); raises ``corral.shared.configio.ConfigError`` naming file, line and field."""
    from corral.shared.config.base import ignored_notices
    from corral.shared.config.compute_config import ComputeConfig
    from corral.shared.config.task import Task
    from corral.shared.configio import ConfigError, load_as

    task, doc = load_as(path, Task)
    data: dict[str, Any] = dict(doc.data)
    notices = list(ignored_notices(task, doc))
    config = task.compute_config
    if isinstance(config, str):
        ref = Path(config).expanduser()
        ref = ref if ref.is_absolute() else path.parent / ref
        if not ref.is_file():
            raise doc.error(("compute_config",), f"no compute config file {str(ref)!r}")
        config, config_doc = load_as(ref, ComputeConfig)
        data["compute_config"] = config_doc.data
        notices += ignored_notices(config, config_doc)
    elif config is not None and (found := config.problems()):
        raise ConfigError([doc.issue(("compute_config", *p), msg) for p, msg in found])
    return TaskFile(data, notices)
