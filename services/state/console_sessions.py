"""The web console's sign-in sessions in Redis: a random id per sign-in, ended at sign-out.

Key layout (``P`` is the prefix)::

    P:console-session:<sha256 of the id>   string, expiring: a mark of the token it was opened by

The browser's cookie holds the id (32 random bytes); only its SHA-256 is a key here, so a
Redis dump holds no usable cookie. Signing out deletes the key: the cookie is worth nothing
after, even if it was copied. The value is a mark of the admin token the session was opened
with, so a changed token ends every session opened with the old one.
"""

from __future__ import annotations

import hashlib
import hmac
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

    def open(self, token_mark: str, ttl_s: int) -> str:
        """A new session's id, valid for ``ttl_s`` seconds."""
        session_id = secrets.token_urlsafe(32)
        self._r.set(self._key(session_id), token_mark, ex=ttl_s)
        return session_id

    def valid(self, session_id: str, token_mark: str) -> bool:
        """Whether ``session_id`` is open and was opened with the token ``token_mark`` marks."""
        if not session_id or len(session_id) > 128:
            return False
        held = self._r.get(self._key(session_id))
        if held is None:
            return False
        stored = held if isinstance(held, bytes) else str(held).encode("utf-8")
        return hmac.compare_digest(stored, token_mark.encode("utf-8"))

    def close(self, session_id: str) -> None:
        """End a session (sign-out); an unknown id is nothing to end."""
        if session_id and len(session_id) <= 128:
            self._r.delete(self._key(session_id))
