"""The node agent is told which metadata service to watch by its protocol, never its cloud: a
name it does not know is refused at start, before it registers (exit 2, the choices named).
The watches themselves run on played AWS and GCP machines in
tests/integration/test_node_recovery.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.services.agent.node import METADATA_URLS, main


def test_an_unknown_metadata_protocol_is_refused_before_registering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "token").write_text("cn2.e.ticket")
    args = ["--api", "http://127.0.0.1:1", "--token-file", str(tmp_path / "token")]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--log", str(tmp_path / "log"), "--notice", "aws"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--notice: invalid choice: 'aws'" in err
    assert all(name in err for name in METADATA_URLS)  # what it takes instead
    assert set(METADATA_URLS) == {"ec2-imds", "gce-metadata"}
