"""Users, their API tokens and projects (with quotas) in Redis.

Key layout (``P`` is the prefix)::

    P:user:<name>         hash {version, json}: a UserRecord (role, projects, token's sha256)
    P:users               set of user names
    P:project:<name>      hash {version, json}: a ProjectRecord (its quota)
    P:projects            set of project names
    P:token:<sha256>      string: the name of the user whose token hashes to it

A token is shown once, when its user is created; only its SHA-256 is kept (a token is 32
random bytes, so a fast hash is enough: there is nothing to guess). Verifying a token reads
the user its hash names and checks the user still holds that hash and is not revoked, so a
revoked user's token stops at once even if the hash key were left behind. Every document write
is a compare-and-set on its version (:mod:`corral.services.state.docstore`).

The first admin is not stored here: it is the token ``corral up`` writes (``CORRAL_HOME/
api-token``, or ``CORRAL_API_TOKEN``), checked by the API as before.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from redis import Redis

from corral.services.state.docstore import DocStore
from corral.shared.quotas import Quota

Role = Literal["admin", "member", "viewer"]
ROLES: tuple[Role, ...] = ("admin", "member", "viewer")
BOOTSTRAP_ADMIN = "admin"  # the name the first admin's token acts as
TOKEN_PREFIX = "crl_"
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_PROJECTS_PER_USER = 64


class UserRecord(BaseModel):
    """One user: a role, the projects it belongs to, and its token's hash (never the token)."""

    model_config = ConfigDict(extra="allow")

    name: str
    role: Role
    projects: list[str] = Field(default_factory=list)
    token_sha256: str
    created_at: float
    revoked_at: float | None = None
    version: int = 0

    def public(self) -> dict[str, object]:
        return {
            "name": self.name,
            "role": self.role,
            "projects": list(self.projects),
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


class ProjectRecord(BaseModel):
    """One project and its quota (an empty quota: no limit)."""

    model_config = ConfigDict(extra="allow")

    name: str
    quota: Quota = Field(default_factory=Quota)
    created_at: float
    version: int = 0


class AccessError(ValueError):
    """A user or project that cannot be made as asked (the message says why)."""


def check_name(what: str, name: str) -> str:
    if not NAME.match(name):
        raise AccessError(
            f"{what} name {name!r}: expected 1 to 63 lower-case letters, digits, '.', '_' or "
            "'-', starting with a letter or digit"
        )
    return name


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


# KEYS[1] the user's document, KEYS[2] the set of user names, KEYS[3] its token hash's key.
# ARGV: name, version, json. The user and its token's key in one step: 1 created, 0 taken.
_CREATE_USER = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'json', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], ARGV[1])
return 1
"""


class AccessBook:
    """Users, tokens and projects of one Corral installation."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._r = redis
        self._prefix = prefix
        self.users: DocStore[UserRecord] = DocStore(
            redis, prefix, "user", UserRecord.model_validate_json
        )
        self.projects: DocStore[ProjectRecord] = DocStore(
            redis, prefix, "project", ProjectRecord.model_validate_json
        )
        self._create_user = redis.register_script(_CREATE_USER)

    def _token_key(self, digest: str) -> str:
        return f"{self._prefix}:token:{digest}"

    # ---- projects -----------------------------------------------------------------------------

    def add_project(self, name: str, now: float, quota: Quota | None = None) -> ProjectRecord:
        """Create a project; AccessError if it exists."""
        record = ProjectRecord(
            name=check_name("project", name), quota=quota or Quota(), created_at=now
        )
        if not self.projects.create(name, record):
            raise AccessError(f"project {name!r} exists already")
        return record

    def set_quota(self, name: str, quota: Quota) -> ProjectRecord:
        """Replace a project's quota; LookupError for an unknown project."""

        def change(p: ProjectRecord) -> bool:
            p.quota = quota
            return True

        updated = self.projects.update(name, change)
        if updated is None:
            raise LookupError(f"no project {name!r}")
        return updated

    def project(self, name: str) -> ProjectRecord | None:
        return self.projects.get(name)

    def list_projects(self) -> list[ProjectRecord]:
        return [p for n in self.projects.names() if (p := self.projects.get(n)) is not None]

    # ---- users --------------------------------------------------------------------------------

    def add_user(
        self, name: str, role: Role, projects: list[str], now: float
    ) -> tuple[UserRecord, str]:
        """Create a user with a new token: the record and the token (shown once, kept nowhere).
        AccessError for a taken name, an unknown project, or a member or viewer without one."""
        check_name("user", name)
        if name == BOOTSTRAP_ADMIN:
            raise AccessError(
                f"user name {name!r} is the first admin's (the token corral up wrote)"
            )
        if role not in ROLES:
            raise AccessError(f"role {role!r}: expected one of {', '.join(ROLES)}")
        wanted = list(dict.fromkeys(projects))
        if len(wanted) > MAX_PROJECTS_PER_USER:
            raise AccessError(f"a user belongs to at most {MAX_PROJECTS_PER_USER} projects")
        if role != "admin" and not wanted:
            raise AccessError(f"a {role} needs a project (--project NAME)")
        missing = [p for p in wanted if self.projects.get(p) is None]
        if missing:
            raise AccessError(
                f"no project {', '.join(map(repr, missing))} (create it first: corral projects add)"
            )
        token = new_token()
        digest = token_hash(token)
        record = UserRecord(
            name=name, role=role, projects=wanted, token_sha256=digest, created_at=now
        )
        keys = [self.users.key(name), f"{self._prefix}:users", self._token_key(digest)]
        created = self._create_user(
            keys=keys, args=[name, record.version, record.model_dump_json()]
        )
        if int(created) != 1:
            raise AccessError(f"user {name!r} exists already (revoke it, then add another name)")
        return record, token

    def revoke(self, name: str, now: float) -> UserRecord:
        """Revoke a user's token (the user stays listed, revoked); LookupError if unknown."""

        def change(u: UserRecord) -> bool:
            if u.revoked_at is not None:
                return False
            u.revoked_at = now
            return True

        updated = self.users.update(name, change)
        if updated is None:
            raise LookupError(f"no user {name!r}")
        self._r.delete(self._token_key(updated.token_sha256))
        return updated

    def user(self, name: str) -> UserRecord | None:
        return self.users.get(name)

    def list_users(self) -> list[UserRecord]:
        return [u for n in self.users.names() if (u := self.users.get(n)) is not None]

    def verify(self, token: str) -> UserRecord | None:
        """The live user whose token this is, or None."""
        if not token or len(token) > 256:
            return None
        digest = token_hash(token)
        raw = self._r.get(self._token_key(digest))
        if raw is None:
            return None
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        user = self.users.get(name)
        if user is None or user.revoked_at is not None:
            return None
        if not secrets.compare_digest(user.token_sha256, digest):
            return None
        return user
