"""Versioned JSON documents in Redis, each write a compare-and-set on ``version``.

One document per key (``P:<kind>:<name>`` hash {version, json}) and a set of the names
(``P:<kind>s``). A writer reads the document with its version, changes a copy, and writes it
only if the stored version is still the one read; a writer that lost the race reads again and
recomputes (:meth:`DocStore.update`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from redis import Redis

from corral.services.state import as_text
from corral.services.state.cas import LOST, Lost, until_written
from corral.services.state.cas import WriteConflict as WriteConflict  # its callers' name for it

# KEYS[1] the document, KEYS[2] the set of names; ARGV: name, version, json.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""

# KEYS[1] the document; ARGV: expected version, new version, json.
# Returns 1 if written, 0 if the version moved on (lost race), -1 if it is gone.
_CAS = """
local current = redis.call('HGET', KEYS[1], 'version')
if not current then return -1 end
if current ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3])
return 1
"""

# KEYS[1] the document, KEYS[2] the set of names; ARGV: name, expected version ("" = any).
_DELETE = """
local current = redis.call('HGET', KEYS[1], 'version')
if not current then return -1 end
if ARGV[2] ~= '' and current ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
"""


class Versioned(Protocol):
    version: int

    def model_dump_json(self) -> str: ...

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any: ...


DocT = TypeVar("DocT", bound=Versioned)


class DocStore(Generic[DocT]):
    """Documents of one kind (a pydantic model with a ``version`` field)."""

    def __init__(
        self, redis: Redis, prefix: str, kind: str, parse: Callable[[bytes | str], DocT]
    ) -> None:
        self._r = redis
        self._prefix = prefix
        self._kind = kind
        self._parse = parse
        self._create = redis.register_script(_CREATE)
        self._cas = redis.register_script(_CAS)
        self._delete = redis.register_script(_DELETE)

    def key(self, name: str) -> str:
        return f"{self._prefix}:{self._kind}:{name}"

    @property
    def _names(self) -> str:
        return f"{self._prefix}:{self._kind}s"

    def create(self, name: str, doc: DocT) -> bool:
        """Store a new document; False (nothing written) if one of that name exists."""
        args: list[str | int] = [name, doc.version, doc.model_dump_json()]
        return int(self._create(keys=[self.key(name), self._names], args=args)) == 1

    def get(self, name: str) -> DocT | None:
        raw = self._r.hget(self.key(name), "json")
        return None if raw is None else self._parse(raw)

    def names(self) -> list[str]:
        return sorted(as_text(n) for n in self._r.smembers(self._names))

    def write(self, name: str, doc: DocT, expected_version: int) -> int:
        """1 written (``doc.version`` set to the new one), 0 lost the race, -1 gone."""
        new = doc.model_copy(update={"version": expected_version + 1})
        args: list[str | int] = [expected_version, new.version, new.model_dump_json()]
        written = int(self._cas(keys=[self.key(name)], args=args))
        if written == 1:
            doc.version = new.version
        return written

    def replace(
        self, name: str, fn: Callable[[DocT], DocT | None], *, retries: int = 100
    ) -> DocT | None:
        """Compute a new document from the current one with ``fn`` (None: nothing to write)
        and write it only if no one wrote in between; a lost race reads again and computes
        again. Returns the document as written (or as read, for a no-op), None if there is
        no such document."""

        def one_round(attempt: int) -> DocT | Lost | None:
            current = self.get(name)
            if current is None:
                return None
            new = fn(current)
            if new is None:
                return current
            written = self.write(name, new, current.version)
            if written == 1:
                return new
            if written == -1:
                return None
            return LOST

        return until_written(one_round, retries=retries, what=f"{self._kind} {name}")

    def update(self, name: str, fn: Callable[[DocT], bool], *, retries: int = 100) -> DocT | None:
        """Change a document with ``fn`` (mutates a fresh copy, True to write it) against
        concurrent writers (see :meth:`replace`)."""

        def changed(current: DocT) -> DocT | None:
            work: DocT = current.model_copy(deep=True)
            return work if fn(work) else None

        return self.replace(name, changed, retries=retries)

    def delete(self, name: str, expected_version: int | None = None) -> int:
        """Remove the document (if still at ``expected_version``, when given): 1 removed, 0
        the version moved on, -1 there is no such document."""
        args = [name, "" if expected_version is None else str(expected_version)]
        return int(self._delete(keys=[self.key(name), self._names], args=args))
