"""A queued job's own workdir (``corral exec ID task.yaml`` whose task names a ``workdir``).

``sky exec`` syncs the task's workdir to the cluster's ``~/sky_workdir`` (and runs no setup,
copies no file_mounts) before it queues the job, so a job queued behind a running one replaces
the running one's files under it. Corral keeps the running job's files whole: each such job's
workdir is unpacked into a folder of its own, ``~/sky_workdir-job-<N>`` (N: its number in
``corral queue``), on each of its nodes when the node starts it (never while it waits), and
the job runs there. The launch's ``~/sky_workdir`` and every other job's folder are left as
they are; a job without a workdir runs in the launch's, as before. The folders go with the
machine.

The bytes come from the node's link (a cloud machine asks the API with its node token, which
serves only the bundles of jobs queued on that node; on the local cloud the control plane
copied it beside the machine's folder as it queued the job),
are checked against the job's sha256 and unpacked under the same rules and cap as a launch's
(:mod:`corral.services.agent.bundle`). Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from corral.services.agent.bundle import BundleError, unpack
from corral.services.agent.sessions import Where

JOB_WORKDIR = "sky_workdir-job-{job}"  # under the node's HOME


def job_workdir(home: Path, job: int) -> Path:
    """Where job ``job``'s own workdir is unpacked on a node whose HOME is ``home``."""
    return home / JOB_WORKDIR.format(job=int(job))


def put_workdir(link: Any, item: dict[str, Any], place: Where) -> Where:
    """Fetch and unpack the job's workdir bundle into its own folder; where the job then
    runs (``place`` with that folder as its working directory). Raises BundleError (a bundle
    that cannot be read, or is not the job's), LinkError (not fetched) or OSError."""
    if place.wrap(["true"], False, False) != ["true"]:  # argv wrapped: a container's
        raise BundleError(
            "a job's own workdir is not supported on a node whose task runs in a container "
            "(image_id: docker:...) yet; leave workdir out to run in the launch's"
        )
    fetch = getattr(link, "fetch_job_bundle", None)
    if fetch is None:
        raise BundleError("this node cannot fetch a job's workdir")
    home = Path(place.env.get("HOME") or os.path.expanduser("~"))
    dest = job_workdir(home, int(item.get("job") or 0))
    data = fetch(item)
    if dest.exists():
        shutil.rmtree(dest)
    cap = item.get("unpacked_max_bytes")
    unpack(data, dict(item["bundle"]), dest, home, jail=True, max_bytes=cap)
    dest.mkdir(parents=True, exist_ok=True)  # an empty workdir packs to no files
    if place.uid is not None:  # the agent unpacked as root: the files become the work's user's
        for root, dirs, files in os.walk(dest):
            for name in [*dirs, *files]:
                with contextlib.suppress(OSError):
                    os.lchown(os.path.join(root, name), place.uid, place.uid)
        os.chown(dest, place.uid, place.uid)
    return Where(str(dest), place.env, place.wrap, place.uid, place.marker)
