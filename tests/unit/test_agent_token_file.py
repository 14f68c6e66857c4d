"""The node agent swaps its boot script's spent ticket for the token registration gave it (or a
renewed one), and keeps it in a file only its user can read (issue #27, items 3 and 7)."""

from __future__ import annotations

from pathlib import Path

from corral.services.agent.node import HttpLink


def test_the_agent_keeps_its_new_token_in_a_private_file(tmp_path: Path) -> None:
    token_file = tmp_path / "node-token"
    token_file.write_text("cn2.e.ticket")
    link = HttpLink("http://127.0.0.1:1", "cn2.e.ticket", token_file=token_file)
    link.use_token("cn2.n.token")
    assert token_file.read_text() == "cn2.n.token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert link._auth == "Bearer cn2.n.token"
