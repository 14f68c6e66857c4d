"""The Python client's views: every field the API's models declare is declared here too (so
typed access covers the whole document), and what a newer API adds is kept, not dropped."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from corral.services.api import schemas
from corral.services.client import views

# The API's response models and the client's view of each.
PAIRS = [
    (schemas.AttemptView, views.AttemptView),
    (schemas.InstanceView, views.InstanceView),
    (schemas.InstanceRow, views.InstanceRow),
    (schemas.RequestView, views.RequestView),
    (schemas.EventView, views.EventView),
    (schemas.EventPage, views.EventPage),
    (schemas.SubmissionView, views.SubmissionView),
    (schemas.Health, views.Health),
    (schemas.PartitionView, views.PartitionView),
    (schemas.MachineTypeView, views.MachineTypeView),
    (schemas.PoolView, views.PoolView),
    (schemas.PoolApplied, views.PoolView),
    (schemas.PoolDeleted, views.PoolDeleted),
    (schemas.WhyView, views.WhyView),
]


@pytest.mark.parametrize(("api", "client"), PAIRS, ids=[a.__name__ for a, _ in PAIRS])
def test_the_client_declares_every_field_the_api_does(
    api: type[BaseModel], client: type[BaseModel]
) -> None:
    missing = set(api.model_fields) - set(client.model_fields)
    assert not missing, f"add {sorted(missing)} to corral.services.client.views.{client.__name__}"


def test_a_field_added_by_a_newer_api_is_kept() -> None:
    sent = {
        "id": "r-1",
        "state": "RUNNING",
        "attempts": [],
        "instances": [
            {
                "id": "i-1",
                "cloud": "local",
                "region": "lab",
                "zone": "lab-a",
                "instance_type": "cpu-2",
                "market": "spot",
                "state": "RUNNING",
                "uptime_s": 12.5,
            }
        ],
        "preemptions": [{"at": 1.0, "by": "r-9"}],
        "state_since": 3.0,
    }
    view = views.RequestView.model_validate(sent)
    assert view.model_extra == {
        "preemptions": [{"at": 1.0, "by": "r-9"}],
        "state_since": 3.0,
    }
    assert view.instances[0].model_extra == {"uptime_s": 12.5}
    assert view.document() == sent  # what was sent, no more (unsent defaults stay out)
    assert not view.ended and views.RequestView(id="r-2", state="CANCELLED").ended
