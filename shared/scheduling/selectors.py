"""Label selectors, as partition rules write them: a label map or a Kubernetes-style string.

Forms (comma-separated terms must all hold)::

    key            the label is set          !key           the label is not set
    key=value      equal (also key==value)   key!=value     not equal (or not set)
    key in (a,b)   one of                    key notin (a,b) none of (or not set)

A label map ``{project: llm, workload-type: job}`` means every label must equal its value.
The grammar itself lives with the pool file's model (``config.machine_pool``), so that a file
that validates is one that schedules; this module compiles a selector once and matches it
fast, and names the whole selector when it cannot be read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from ..config.machine_pool import Requirement, parse_selector

SelectorSpec = str | Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector: its terms, all of which must hold. ``text`` is for messages."""

    text: str
    terms: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a workload with these labels meets every term (an empty selector: always)."""
        as_dict = labels if isinstance(labels, dict) else dict(labels)
        return all(term.matches(as_dict) for term in self.terms)


def describe(spec: SelectorSpec) -> str:
    """A selector as one line of text: strings as written, maps as ``k=v,k=v``."""
    if isinstance(spec, str):
        return spec.strip()
    return ",".join(f"{key}={value}" for key, value in sorted(spec.items()))


@lru_cache(maxsize=4096)
def _compile_text(text: str) -> Selector:
    try:
        return Selector(text, parse_selector(text))
    except ValueError as exc:
        raise ValueError(f"selector {text!r}: {exc}") from None


def compile_selector(spec: SelectorSpec) -> Selector:
    """A selector string or label map -> a :class:`Selector`. Strings are compiled once and
    cached. ValueError, naming the selector, when a string cannot be read."""
    if isinstance(spec, str):
        return _compile_text(spec)
    # YAML reads `tier: 1` as a number; labels are text (as the pool model does it).
    labels = {str(k): v if isinstance(v, str) else str(v).lower() for k, v in spec.items()}
    return Selector(describe(labels), parse_selector(labels))


def matches(spec: SelectorSpec, labels: Mapping[str, str]) -> bool:
    """Whether labels meet a selector given as text or a label map."""
    return compile_selector(spec).matches(labels)
