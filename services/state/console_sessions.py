"""The web console's sign-in sessions in Redis: a random id per sign-in, ended at sign-out.

Key layout (``P`` is the prefix)::

    P:console-session:<sha256 of the id>   string, expiring: "<user>\n<mark of its token>"

The browser's cookie holds the id (32 random bytes); only its SHA-256 is a key here, so a
Redis dump holds no usable cookie. Signing out deletes the key: the cookie is worth nothing
after, even if it was copied. The value names the user who signed in and a mark of the token
it signed in with; the console checks both on every page (services/api/console/auth.py), so a
revoked or changed token ends every session opened with it.
"""

from __future__ import annotations

import hashlib
import secrets

from redis import Redis


class ConsoleSessions:
    """Sessions of one installation's console."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._r = redis
        self._prefix = prefix

    def _key(self, session_id: str) -> str:
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()
        return f"{self._prefix}:console-session:{digest}"

    def open(self, user: str, token_mark: str, ttl_s: int) -> str:
        """A new session's id for ``user`` (signed in with the token ``token_mark`` marks),
        valid for ``ttl_s`` seconds."""
        session_id = secrets.token_urlsafe(32)
        self._r.set(self._key(session_id), f"{user}\n{token_mark}", ex=ttl_s)
        return session_id

    def holder(self, session_id: str) -> tuple[str, str] | None:
        """The user an open session is of and the mark of the token it was opened with."""
        if not session_id or len(session_id) > 128:
            return None
        held = self._r.get(self._key(session_id))
        if held is None:
            return None
        text = held.decode("utf-8") if isinstance(held, bytes) else str(held)
        user, _, mark = text.partition("\n")
        return (user, mark) if user and mark else None

    def close(self, session_id: str) -> None:
        """End a session (sign-out); an unknown id is nothing to end."""
        if session_id and len(session_id) <= 128:
            self._r.delete(self._key(session_id))
