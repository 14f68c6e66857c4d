"""Filing a pass's answers (why each workload or task waits) in its ledger's notes.

A ledger's notes map each waiting workload's (or task's) id to the answer its last pass gave
it, every answer filed under its own id. A long queue is told the same, pass after pass, and
the answers a pass gives again are very often the same objects as those filed, in the same
order (a Determined pass extended from the last one, a machine pool's runs of alike work told
what was kept): those are found by comparing pointers at C speed, without reading the
answers' ids (a memory read per answer, scattered: most of what filing a long queue cost), and
only the rest are filed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress, count
from operator import is_not
from typing import TypeVar

A = TypeVar("A")


def file_answers(notes: dict[str, A], answers: Sequence[A], id_of: Callable[[A], str]) -> None:
    """``notes.update((id_of(a), a) for a in answers)``: the leading answers already filed (the
    very objects, in the notes' order) are left as they are, the rest filed."""
    filed = list(notes.values())  # pointers copied, nothing read
    same = next(compress(count(), map(is_not, filed, answers)), min(len(filed), len(answers)))
    rest = answers[same:]
    notes.update(zip(map(id_of, rest), rest, strict=True))
