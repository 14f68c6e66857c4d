"""Task bundles in Redis: the gzip'd tar ``corral launch`` uploads, under its sha256.

Kept base64-encoded (every reader, the local cloud's text-only agent client included, can
take it) for ``BUNDLE_TTL_S`` after its last use; a launch that names a bundle renews it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

import redis

from corral.shared.bundles import bundle_key

BUNDLE_TTL_S = 7 * 24 * 3600


class BundleStore:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.r = client
        self.prefix = prefix

    def put(self, sha256: str, data: bytes) -> bool:
        """Keep ``data`` under ``sha256`` (ValueError when it is not its checksum); False when
        it was there already."""
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError("the body's sha256 is not the one in the path")
        key = bundle_key(self.prefix, sha256)
        added = self.r.set(key, base64.b64encode(data), ex=BUNDLE_TTL_S, nx=True)
        if not added:
            self.r.expire(key, BUNDLE_TTL_S)
        return bool(added)

    def has(self, sha256: str) -> bool:
        """Whether the bundle is kept (and, if so, kept on for another TTL)."""
        return bool(self.r.expire(bundle_key(self.prefix, sha256), BUNDLE_TTL_S))

    def get(self, sha256: str) -> bytes | None:
        raw = self.r.get(bundle_key(self.prefix, sha256))
        if raw is None:
            return None
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return None
