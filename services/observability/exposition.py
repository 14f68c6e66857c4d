"""What /metrics serves, in the API and in each worker.

**Prefork workers.** A Celery worker runs tasks in child processes, each with its own memory,
and the main process, the one that can serve HTTP, runs none. So ``corral run worker`` gives
every worker a fresh folder of its own and sets ``PROMETHEUS_MULTIPROC_DIR`` to it before
Celery starts (:func:`worker_environment`): prometheus_client then keeps each process's
counters in a file there, and the main process serves the sum of all files
(:func:`scrape_registry`). A child that exits cleanly marks itself dead (its live gauges go);
one that was killed is found at the next scrape and marked the same way
(:class:`_Multiprocess`). Counters of dead children stay in the sum: a total never goes back.

**The API** serves its own process's counters and the state gauges computed from Redis
(:mod:`.state_metrics`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from corral.services.settings import Settings

log = logging.getLogger("corral.metrics")

DIR_PREFIX = "corral-metrics-"  # folders Corral makes (and removes) for one worker each
_PID_FILE = re.compile(r"_(\d+)\.db$")
_OWNER = re.compile(rf"^{DIR_PREFIX}[a-z]+-(\d+)-")  # the worker's pid in its folder's name


def worker_environment(settings: Settings, role: str, port: int | None) -> dict[str, str]:
    """The environment ``corral run worker`` adds before Celery starts, when the worker serves
    /metrics: the port, and a fresh, empty folder for its processes' metric files, named after
    this process (Celery replaces it, keeping the pid). Folders left by workers that were
    killed (a clean stop removes its own) are removed first."""
    if port is None:
        return {}
    root = settings.metrics_dir or Path(tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob(f"{DIR_PREFIX}*"):
        m = _OWNER.match(old.name)
        if m and old.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(old, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{role}-{os.getpid()}-", dir=root)
    return {"PROMETHEUS_MULTIPROC_DIR": folder, "CORRAL_METRICS_PORT": str(port)}


def scrape_registry(settings: Settings, *extra: Any) -> Any:
    """A registry with this process's metrics (all its processes' in multiprocess mode) and
    ``extra`` collectors."""
    from prometheus_client import REGISTRY, CollectorRegistry, ProcessCollector

    registry = CollectorRegistry()
    folder = settings.prometheus_multiproc_dir
    if folder is not None:
        registry.register(_Multiprocess(folder))
        ProcessCollector(registry=registry)  # the serving process's own CPU and memory
    else:
        registry.register(_Forward(REGISTRY))
    for collector in extra:
        registry.register(collector)
    return registry


class _Forward:
    """Everything in another registry (prometheus_client's default one), as one collector."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        yield from self.registry.collect()


class _Multiprocess:
    """The sum of every process's files in ``folder``; processes that died without saying so
    (killed) are marked dead first."""

    def __init__(self, folder: Path) -> None:
        from prometheus_client.multiprocess import MultiProcessCollector

        self.folder = Path(folder)
        self.inner = MultiProcessCollector(None, path=str(folder))  # type: ignore[no-untyped-call]
        self.marked: set[int] = set()

    def collect(self) -> Iterable[Any]:
        self.sweep()
        found: Iterable[Any] = self.inner.collect()  # type: ignore[no-untyped-call]
        return found

    def sweep(self) -> None:
        from prometheus_client import multiprocess

        names = (f.name for f in self.folder.glob("*.db"))
        pids = {int(m.group(1)) for name in names if (m := _PID_FILE.search(name))}
        for pid in pids - self.marked:
            if not _alive(pid):
                multiprocess.mark_process_dead(pid, str(self.folder))  # type: ignore[no-untyped-call]
                self.marked.add(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def mark_dead(settings: Settings, pid: int) -> None:
    """A worker child exits: its live gauges leave the sum (its counters stay)."""
    if settings.prometheus_multiproc_dir is not None:
        from prometheus_client import multiprocess

        folder = str(settings.prometheus_multiproc_dir)
        multiprocess.mark_process_dead(pid, folder)  # type: ignore[no-untyped-call]


class MetricsServer:
    """A worker's /metrics over HTTP on ``host:port``, started in the worker's main process.

    Binding is tried again for a while: a worker restarted at once may find its port still
    held by children of the one before, which exit within seconds of their parent."""

    def __init__(self, settings: Settings, bind_timeout_s: float = 30.0) -> None:
        self.settings = settings
        self.bind_timeout_s = bind_timeout_s
        self.server: Any = None

    def start(self) -> None:
        threading.Thread(target=self._serve, name="corral-metrics", daemon=True).start()

    def _serve(self) -> None:
        from prometheus_client import start_http_server

        port, host = self.settings.metrics_port, self.settings.metrics_host
        assert port is not None
        registry = scrape_registry(self.settings)
        deadline = time.monotonic() + self.bind_timeout_s
        while True:
            try:
                self.server, _thread = start_http_server(port, addr=host, registry=registry)
                log.info("metrics on http://%s:%d/metrics", host, port)
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    log.error("metrics: cannot listen on %s:%d: %s; not served", host, port, exc)
                    return
                time.sleep(0.5)

    def stop(self) -> None:
        if self.server is not None:
            with contextlib.suppress(Exception):
                self.server.shutdown()


def remove_folder(settings: Settings) -> None:
    """Remove this worker's metric folder at its end (only a folder Corral made)."""
    folder = settings.prometheus_multiproc_dir
    if folder is not None and Path(folder).name.startswith(DIR_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)
