"""The head's Ray addresses as `cluster status` shows them: a dashboard bound to every
interface is shown at the head's address; one bound to loopback (Ray's default,
``--dashboard-host=127.0.0.1``) answers on the head only and is shown as it is."""

from __future__ import annotations

import pytest

from corral.services.runtime.cluster_nodes import summary
from corral.shared.autoscaler.ray_report import RayReport


@pytest.mark.parametrize(
    ("reported", "shown"),
    [
        ("0.0.0.0:8265", "http://10.0.0.5:8265"),
        ("[::]:8265", "http://10.0.0.5:8265"),
        ("127.0.0.1:8265", "http://127.0.0.1:8265"),
        ("10.0.0.5:8265", "http://10.0.0.5:8265"),
        ("", None),
    ],
)
def test_the_dashboard_address(reported: str, shown: str | None) -> None:
    report = RayReport(gcs_address="10.0.0.5:6379", dashboard=reported, head_ip="10.0.0.5")
    view = summary(report)
    assert view is not None
    assert view["dashboard"] == shown
    assert view["gcs_address"] == "10.0.0.5:6379"


def test_no_report_no_addresses() -> None:
    assert summary(None) is None
