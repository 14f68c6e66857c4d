"""``corral version``: Corral's version, its main dependencies' and the reachable Redis's.

The package versions come from the installed distributions' metadata, so nothing heavy is
imported to learn them. The Redis is the one Corral is configured with (``CORRAL_REDIS_URL``,
else the ``<home>/redis-url`` file ``corral up`` writes); its address is printed with any
password masked, and one that does not answer within a second is said to be unreachable.
"""

from __future__ import annotations

import platform
from typing import Annotated, Any

import typer

from corral.services.cli.output import out, print_json

# The distributions Corral is built on, in the order they are printed.
DEPENDENCIES = (
    "celery",
    "kombu",
    "redis",
    "celery-redbeat",
    "pydantic",
    "pydantic-settings",
    "fastapi",
    "uvicorn",
    "httptools",
    "httpx",
    "typer",
    "boto3",
    "google-cloud-compute",
    "flower",
)
REDIS_TIMEOUT_S = 1.0
REDIS_URL_FILE = "redis-url"


def register(app: typer.Typer) -> None:
    """Add ``corral version`` to the app."""
    app.command("version")(version)


def installed(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(name)
    except PackageNotFoundError:
        return None


def redis_server() -> dict[str, Any]:
    """``{"url", "version", "error"}`` of the configured Redis (url None: none configured)."""
    from corral.services.cli.supervisor import masked_url
    from corral.services.settings import get_settings

    settings = get_settings()
    url = settings.redis_url
    if not url:
        try:
            url = settings.file(REDIS_URL_FILE).read_text(encoding="utf-8").strip() or None
        except OSError:
            url = None
    if url is None:
        return {"url": None, "version": None, "error": "no Redis configured"}
    import redis

    from corral.services.queues.redis_conn import connect

    try:
        client = connect(url, patience_s=REDIS_TIMEOUT_S)  # a Sentinel URL too
        with client:
            found = str(client.info("server")["redis_version"])
    except (redis.RedisError, OSError, ValueError, KeyError) as exc:
        return {"url": masked_url(url), "version": None, "error": type(exc).__name__}
    return {"url": masked_url(url), "version": found, "error": None}


def version(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Corral's version, its main dependencies' and the version of the Redis it reaches."""
    dependencies = {name: installed(name) for name in DEPENDENCIES}
    server = redis_server()
    report: dict[str, Any] = {
        "corral": installed("corral"),
        "python": platform.python_version(),
        "dependencies": dependencies,
        "redis_server": server,
    }
    if as_json:
        print_json(report)
        return
    width = max(map(len, DEPENDENCIES))
    lines = [f"corral {report['corral']}", f"  {'python':<{width}}  {report['python']}"]
    for name, found in dependencies.items():
        lines.append(f"  {name:<{width}}  {found or 'not installed'}")
    if server["version"]:
        lines.append(f"redis-server {server['version']} at {server['url']}")
    elif server["url"]:
        lines.append(f"redis-server: no answer at {server['url']} ({server['error']})")
    else:
        lines.append("redis-server: none configured (CORRAL_REDIS_URL, or `corral up` running)")
    for line in lines:
        out.print(line, markup=False)
