"""The classes a field can be in, and one field's entry (see :mod:`corral.shared.config.compat`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Support(StrEnum):
    """How Corral treats a field."""

    HONOURED = "honoured"
    NOTICED = "noticed"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Entry:
    """One field's class. ``what``: for honoured, what Corral does; for noticed, what it does
    instead (the notice's text); for refused, why. ``test``: for honoured, the test that proves
    it (``tests/...py::test_name``). ``by_model``: a noticed field whose notice the model (or
    the cloud's cluster-file check) gives itself, for the values that need one."""

    support: Support
    what: str
    test: str = ""
    by_model: bool = False

    def notices_when_set(self) -> bool:
        """Whether setting the field at all draws the generic notice."""
        return self.support is Support.NOTICED and not self.by_model


def honoured(what: str, test: str) -> Entry:
    """A field acted on as its own system does, with the test that shows it."""
    return Entry(Support.HONOURED, what, test)


def noticed(instead: str, *, by_model: bool = False) -> Entry:
    """A field accepted with a notice saying what Corral does instead."""
    return Entry(Support.NOTICED, instead, by_model=by_model)


def refused(why: str) -> Entry:
    """A field the file is refused for."""
    return Entry(Support.REFUSED, why)


# A model class's name -> the key as written -> its class.
Table = dict[str, dict[str, Entry]]

# Said of a key a pass-through mapping holds that no table lists (a provider plugin's own key).
UNLISTED = "not a field Corral knows here; Corral does not act on it"
