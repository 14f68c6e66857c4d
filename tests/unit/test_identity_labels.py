"""The identity labels rule (corral.shared.identity): ``project`` and ``user`` come from the
server; a task naming other values is refused, naming the label (issue #47 item 2)."""

from __future__ import annotations

from corral.shared.identity import IDENTITY_LABELS, stamp_identity

SERVER = {"project": "teamb", "user": "bob"}


def test_the_servers_values_are_written_in() -> None:
    labels, problems = stamp_identity({"team": "x"}, SERVER, trusted=False)
    assert problems == []
    assert labels == {"team": "x", "project": "teamb", "user": "bob"}


def test_the_same_value_is_accepted() -> None:
    labels, problems = stamp_identity({"project": "teamb"}, SERVER, trusted=False)
    assert problems == [] and labels["project"] == "teamb"


def test_a_spoofed_project_or_user_is_refused_naming_the_label() -> None:
    given = {"project": "teama", "user": "alice", "team": "x"}
    _, problems = stamp_identity(given, SERVER, trusted=False)
    assert [path for path, _ in problems] == [("labels", "project"), ("labels", "user")]
    assert "'teamb'" in problems[0][1] and "'teama'" in problems[0][1]
    # An admin's token does not make another value right either: the label says who sent it.
    _, problems = stamp_identity(given, SERVER, trusted=True)
    assert len(problems) == 2


def test_a_label_the_server_leaves_open_is_an_admins_to_set() -> None:
    server = {"project": None, "user": "admin"}
    labels, problems = stamp_identity({"project": "teama"}, server, trusted=True)
    assert problems == [] and labels == {"project": "teama", "user": "admin"}
    _, problems = stamp_identity({"project": "teama"}, server, trusted=False)
    assert [path for path, _ in problems] == [("labels", "project")]


def test_the_given_labels_are_not_changed() -> None:
    given = {"project": "teamb"}
    stamp_identity(given, SERVER, trusted=False)
    assert given == {"project": "teamb"}
    assert IDENTITY_LABELS == ("project", "user")
