"""Start a worker or beat of the one app without Celery's command line.

``corral run worker`` and ``corral run beat`` exec ``python -m corral.workers.start worker|beat``.
Celery's own command line (``celery -A corral.workers.app worker``, which still works) builds
its click group first, and that loads every installed plugin's command: Flower's among them,
with Tornado and its views. That was about 0.6 s of CPU before each worker or beat did anything
(``python -X importtime -c "import celery.bin.celery"``). Here the app's ``Worker`` and ``Beat``
are made directly, with the same options the command line would pass.
"""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m corral.workers.start")
    parser.add_argument("--quiet", action="store_true", help="no start-up banner (JSON logs)")
    parser.add_argument("--loglevel", default="INFO")
    roles = parser.add_subparsers(dest="what", required=True)
    worker = roles.add_parser("worker", help="a worker consuming the given queues")
    worker.add_argument("--queues", required=True, help="comma-separated queue names")
    worker.add_argument("--hostname", required=True, help="node name; %%h is the host")
    worker.add_argument("--concurrency", type=int, required=True)
    beat = roles.add_parser("beat", help="beat (the scheduler class is the app's setting)")
    beat.add_argument("--scheduler", default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a worker or beat in this process until it stops; its exit code."""
    args = _parser().parse_args(argv)
    from corral.workers.app import app

    if args.what == "beat":
        app.Beat(scheduler=args.scheduler, loglevel=args.loglevel, quiet=args.quiet).run()
        return 0
    from celery.utils.nodenames import default_nodename, host_format

    worker = app.Worker(
        hostname=host_format(default_nodename(args.hostname)),
        pool_cls="prefork",
        concurrency=args.concurrency,
        queues=args.queues.split(","),
        loglevel=args.loglevel,
        task_events=True,  # -E: Flower's task view
        without_gossip=True,
        without_mingle=True,
        quiet=args.quiet,
    )
    worker.start()
    return int(worker.exitcode or 0)


if __name__ == "__main__":
    sys.exit(main())
