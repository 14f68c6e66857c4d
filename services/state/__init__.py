"""Corral's state in Redis: requests and instances (``store``), versioned documents
(``docstore``) and what is kept in them (registered pools and their ledgers in ``pool_store``,
autoscaled clusters in ``clusters``), and the shared capacity-error memory (``blocks``)."""


def as_text(value: object) -> str:
    """A member or value from Redis as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)
