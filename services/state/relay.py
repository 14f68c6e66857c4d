"""The one byte relay: bytes one side writes and another reads later, kept in Redis as a list of
chunks, oldest first. A node's log (state/nodes.py), a command's output and a session's two
streams (state/execs.py, and the local agent's side of both in providers/local/agent.py) are
each one :class:`Stream`.

A stream is read one of two ways:

- **from a cursor** (:func:`read_since`): nothing is taken; a byte counter (a hash field,
  ``counter``) numbers every byte ever appended, so a reader comes back with the offset it
  reached and a writer that resends (a lost answer) says where its bytes start (``at``) and is
  not repeated. A log, a command's output.
- **drained** (:func:`take`, :func:`wait_take`): what waits is taken off, by its one reader. A
  session's streams, whose entries are text (:func:`encode_entries`): base64 chunks, a
  terminal's size (``size:ROWS:COLS``) and an empty entry for the end.

Limits, each a stream's own: ``max_bytes`` (appends past it are cut, with a note), ``keep_bytes``
(the oldest chunks dropped past it; a field ``kept`` counts what the list holds),
``max_pending`` (entries waiting in a drained stream: past it the writer is told to wait), and
``ttl_s``, renewed by every write, on the list and on the ``touch`` keys.

It runs on redis-py's client and on the node agent's ``MiniRedis`` alike: it calls
``execute_command`` and transactions of them, nothing else. Bytes are written as they are;
a reader of arbitrary bytes needs raw replies (redis-py's default), while drained entries are
text, which a decoding client (``MiniRedis``) reads too.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from corral.shared.execs import END_OF_STREAM, RESIZE_PREFIX

Command = Sequence[Any]


@dataclass(frozen=True)
class Stream:
    """Where one stream lives and its limits (the module's docstring says what each does)."""

    key: str  # the list of chunks (entries, for a drained stream), oldest first
    ttl_s: int
    counter: tuple[str, str] | None = None  # (hash, field): bytes ever appended
    kept: str | None = None  # a field of the same hash: bytes the list holds (keep_bytes)
    max_bytes: int | None = None
    keep_bytes: int | None = None
    max_pending: int | None = None
    touch: tuple[str, ...] = ()


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _joined(chunks: Any) -> bytes:
    return b"".join(_bytes(c) for c in chunks or [])


def command(r: Any, *args: Any) -> Any:
    """One command on either client (redis-py's or the agent's), its reply."""
    return r.execute_command(*args)


def together(r: Any, commands: Sequence[Command], transaction: bool = True) -> list[Any]:
    """``commands`` in one round trip (in a MULTI/EXEC with ``transaction``), their replies."""
    pipe = r.pipeline(transaction=transaction)
    for each in commands:
        pipe.execute_command(*each)
    return list(pipe.execute())


# --- read from a cursor: a log, a command's output ------------------------------------------
def append(r: Any, s: Stream, data: bytes, at: int | None = None, cut_note: bytes = b"") -> int:
    """Append ``data`` (sent from byte ``at`` of the stream, when the writer numbers its
    bytes): only what the stream does not hold yet, up to ``max_bytes`` (``cut_note`` after
    the cut). The bytes the stream has counted since its start, after the write."""
    assert s.counter is not None, "a stream read from a cursor counts its bytes"
    owner, field = s.counter
    held = int(r.execute_command("HGET", owner, field) or 0)
    if at is not None:
        if at > held or at + len(data) <= held:
            return held  # a gap (the writer resyncs from ``held``) or all of it already here
        data = data[held - at :]
    if s.max_bytes is not None:
        room = s.max_bytes - held
        if room <= 0:
            return held
        if len(data) > room:
            data = data[:room] + cut_note
    if not data:
        return held
    commands: list[Command] = [
        ("RPUSH", s.key, data),
        ("HINCRBY", owner, field, len(data)),
        ("EXPIRE", s.key, s.ttl_s),
    ]
    if s.kept is not None:
        commands.append(("HINCRBY", owner, s.kept, len(data)))
    replies = together(r, commands)
    if s.kept is not None and s.keep_bytes is not None:
        kept = int(replies[3])
        while kept > s.keep_bytes:
            dropped = r.execute_command("LPOP", s.key)
            if not dropped:
                break
            kept = int(r.execute_command("HINCRBY", owner, s.kept, -len(_bytes(dropped))))
    return int(replies[1])


def read_since(r: Any, s: Stream, offset: int) -> tuple[int, bytes, int]:
    """The stream from byte ``offset`` of everything appended: (the offset the bytes start at,
    the bytes, the offset they end at: the next read's cursor). The start is later than
    ``offset`` when that part is no longer kept. One round trip."""
    assert s.counter is not None, "a stream read from a cursor counts its bytes"
    total_raw, chunks = together(r, [("HGET", *s.counter), ("LRANGE", s.key, 0, -1)])
    data = _joined(chunks)
    first = max(0, int(total_raw or 0) - len(data))  # the kept tail starts here
    start = max(offset, first)
    return start, data[start - first :], first + len(data)


def read_all(r: Any, s: Stream) -> bytes:
    """Every byte the stream still holds."""
    return _joined(r.execute_command("LRANGE", s.key, 0, -1))


# --- drained: a session's streams -----------------------------------------------------------
def encode_entries(
    data: bytes, eof: bool = False, size: tuple[int, int] | None = None
) -> list[str]:
    """A drained stream's entries for ``data``, then a terminal ``size``, then the end."""
    return (
        ([base64.b64encode(data).decode()] if data else [])
        + ([f"{RESIZE_PREFIX}{size[0]}:{size[1]}"] if size else [])
        + ([END_OF_STREAM] if eof else [])
    )


def decode_entries(entries: Any) -> tuple[bytes, bool, tuple[int, int] | None]:
    """Entries as the bytes they carry, whether the end was among them (nothing after it is
    read), and the last terminal size."""
    data, eof, size = b"", False, None
    for entry in entries or []:
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        if text == END_OF_STREAM:
            eof = True
            break
        if text.startswith(RESIZE_PREFIX):
            rows, _, cols = text[len(RESIZE_PREFIX) :].partition(":")
            size = (int(rows), int(cols))
            continue
        data += base64.b64decode(text)
    return data, eof, size


def push(r: Any, s: Stream, entries: Sequence[str], also: Sequence[Command] = ()) -> bool:
    """Append ``entries`` (with ``also``, commands of the same transaction); False, and nothing
    written, when ``max_pending`` entries wait already (the reader is behind: write later)."""
    if s.max_pending is not None and int(r.execute_command("LLEN", s.key) or 0) >= s.max_pending:
        return False
    if entries:
        renew = [("EXPIRE", key, s.ttl_s) for key in (s.key, *s.touch)]
        together(r, [("RPUSH", s.key, *entries), *renew, *also])
    return True


def take(r: Any, s: Stream, batch: int) -> list[Any]:
    """Up to ``batch`` entries, taken off the stream."""
    return list(r.execute_command("LPOP", s.key, batch) or [])


def wait_take(r: Any, s: Stream, wait_s: float, batch: int) -> list[Any] | None:
    """The first entry to come within ``wait_s`` (at once if one waits) and up to ``batch``
    behind it, taken off; None when none came."""
    first = r.execute_command("BLPOP", s.key, str(wait_s))
    if not first:
        return None
    return [first[1], *take(r, s, batch)]
