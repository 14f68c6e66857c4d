"""A workload's identity labels (``project``, ``user``) come from the server, not its author.

Partition rules and budgets select on a workload's labels (``selector: project=llm``), so a
label the submitter may write is not an identity. When a task is submitted, the API stamps
these labels from the caller's token: the project the request goes to and the user who sent
it. A task that already names a different value is refused, naming the label; the same value
is accepted (a file written for its own project keeps working). Where the server has no value
(the first admin's or the ``schedule`` queue's submissions without a project), a label given
is kept only for a caller trusted with every project (an admin); anyone else is refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from .configio import PathKey

# The label names the server owns, in the order they are reported.
IDENTITY_LABELS: tuple[str, ...] = ("project", "user")


def stamp_identity(
    given: Mapping[str, str], server: Mapping[str, str | None], *, trusted: bool
) -> tuple[dict[str, str], list[tuple[PathKey, str]]]:
    """The labels with the server's identity values written in, and the problems found (each
    with the path of the label at fault, ``("labels", name)``). ``server`` maps each of
    :data:`IDENTITY_LABELS` to its value, None where the server has none; ``trusted`` says
    whether the caller may set a label the server leaves open (an admin)."""
    labels = dict(given)
    problems: list[tuple[PathKey, str]] = []
    for name in IDENTITY_LABELS:
        value = server.get(name)
        written = labels.get(name)
        if value is None:
            if written is not None and not trusted:
                problems.append(
                    (("labels", name), f"the {name!r} label is set by the server; leave it out")
                )
            continue
        if written is not None and written != value:
            problems.append(
                (
                    ("labels", name),
                    f"the {name!r} label is set by the server from your token to {value!r}; "
                    f"it cannot be {written!r} (leave it out, or submit to that {name} with "
                    "its own token)",
                )
            )
        labels[name] = value
    return labels, problems
