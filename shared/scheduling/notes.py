"""Filing a pass's answers (why each workload or task waits) in its ledger's notes.

A ledger's notes map each waiting workload's (or task's) id to the answer its last pass gave
it, every answer filed under its own id. A long queue is told the same, pass after pass, and
most answers a pass gives are the very objects already filed (a Determined pass extended from
the last one, a machine pool's runs of alike work told what was kept). Those are found by
their identity at C speed, without reading the answers' ids (a scattered memory read per
answer: most of what filing a long queue cost), and only the rest are filed. An answer that
is one of the notes' objects is filed under its own id already: both are alive, so their
identities cannot collide otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from operator import not_
from typing import TypeVar

A = TypeVar("A")


def file_answers(notes: dict[str, A], answers: Sequence[A], id_of: Callable[[A], str]) -> None:
    """``notes.update((id_of(a), a) for a in answers)``, leaving out the answers that are
    already among the notes (the very objects). A pass answers each at most once."""
    filed = set(map(id, notes.values()))  # pointers, nothing read
    rest = list(compress(answers, map(not_, map(filed.__contains__, map(id, answers)))))
    notes.update(zip(map(id_of, rest), rest, strict=True))
