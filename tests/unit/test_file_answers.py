"""Filing a pass's answers in a ledger's notes (``scheduling.notes.file_answers``): the notes
end as ``dict.update`` leaves them, and the leading answers already filed are not read."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from corral.shared.scheduling.notes import file_answers


@dataclass(frozen=True)
class _Answer:
    who: str
    says: str


def _filed(notes: dict[str, _Answer], answers: list[_Answer]) -> tuple[dict[str, _Answer], int]:
    read: list[str] = []

    def id_of(answer: _Answer) -> str:
        read.append(answer.who)
        return answer.who

    out = dict(notes)
    file_answers(out, answers, id_of)
    return out, len(read)


def test_the_same_answers_again_are_not_read() -> None:
    answers = [_Answer(f"w{i}", "full") for i in range(5)]
    notes = {a.who: a for a in answers}
    out, read = _filed(notes, [*answers, _Answer("w5", "full")])
    assert read == 1 and list(out) == [f"w{i}" for i in range(6)]


def test_an_equal_answer_that_is_another_object_is_filed() -> None:
    answers = [_Answer(f"w{i}", "full") for i in range(3)]
    notes = {a.who: a for a in answers}
    again = [answers[0], _Answer("w1", "full"), answers[2]]
    out, read = _filed(notes, again)
    assert read == 2 and all(out[a.who] is a for a in again)


@pytest.mark.parametrize("seed", range(20))
def test_notes_end_as_a_plain_update_leaves_them(seed: int) -> None:
    rng = random.Random(seed)
    pool = [_Answer(f"w{i}", rng.choice(("full", "blocked"))) for i in range(30)]
    notes = {a.who: a for a in rng.sample(pool, rng.randint(0, 30))}
    answers = list(notes.values())[: rng.randint(0, len(notes))]
    answers += [
        rng.choice((a, _Answer(a.who, a.says)))
        for a in rng.sample(pool, rng.randint(0, 10))
        if a.who not in {b.who for b in answers}
    ]
    expected = dict(notes)
    expected.update((a.who, a) for a in answers)
    out, _ = _filed(notes, answers)
    assert list(out.items()) == list(expected.items())
    assert all(out[k] is v for k, v in expected.items())
