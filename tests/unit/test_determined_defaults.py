"""Determined's defaults as its current code has them (issue #45 item 4), each case translated
from Determined's own source or test, named where it comes from:

- ``master/internal/config/scheduler_config.go`` (``SchedulerConfig.UnmarshalJSON``, since
  Determined's PR #9385): a scheduler section naming no ``type`` is the priority scheduler,
  default priority 42; ``fitting_policy`` unset is ``best``.
- ``master/internal/config/resource_pool_config.go`` (``ResourcePoolConfig.UnmarshalJSON``): a
  pool is parsed without the unknown-field check, so a pool-level ``max_slots`` loads and is
  dropped. Corral accepts it too, with a notice saying it does not act on it.
"""

from __future__ import annotations

from pathlib import Path

from corral.shared.config.detect import load_config
from corral.shared.config.master_config import MasterConfig
from corral.shared.resource_pools import resolve_pools


def _load(tmp_path: Path, text: str) -> tuple[MasterConfig, list[str]]:
    path = tmp_path / "master.yaml"
    path.write_text(text)
    loaded = load_config(path)
    assert isinstance(loaded.model, MasterConfig)
    return loaded.model, loaded.notices


def test_resource_pool_defaults(tmp_path: Path) -> None:
    """scheduler_config_test.go: TestResourcePoolDefaults. The manager's scheduler is
    priority/best; the pool's sets only fitting_policy: worst, so it inherits nothing, and its
    blank type is priority (it was fair_share before Determined's PR #9385)."""
    master, _ = _load(
        tmp_path,
        """
db: {user: config_file_user, password: password, host: hostname, port: "3000"}
resource_manager:
  type: agent
  scheduler:
    type: priority
    fitting_policy: best
resource_pools:
- pool_name: default
  scheduler:
    fitting_policy: worst
""",
    )
    [pool] = resolve_pools(master).pools
    assert (pool.scheduler.type, pool.scheduler.fitting_policy) == ("priority", "worst")
    assert pool.scheduler.inherited is False


def test_a_blank_scheduler_type_is_priority_with_default_priority_42(tmp_path: Path) -> None:
    """scheduler_config.go: SchedulerConfig.UnmarshalJSON fills Priority{DefaultPriority: 42}
    when no type is named, and preemption stays off (PrioritySchedulerConfig's zero value)."""
    master, _ = _load(
        tmp_path,
        """
resource_manager:
  scheduler:
    fitting_policy: worst
resource_pools:
- pool_name: default
""",
    )
    [pool] = resolve_pools(master).pools
    assert (pool.scheduler.type, pool.scheduler.fitting_policy) == ("priority", "worst")
    assert pool.scheduler.inherited is True
    assert not pool.scheduler.preemption
    assert pool.scheduler.default_priority in (None, 42)  # None reads as 42 (SchedulerSettings)


def test_a_multi_pool_master_with_pool_level_max_slots_loads_with_a_notice(
    tmp_path: Path,
) -> None:
    """resource_pool_config.go: ResourcePoolConfig.UnmarshalJSON parses a pool with plain
    json.Unmarshal (no unknown-field check), so Determined loads this file and drops
    max_slots. Corral loads it too and says, at the line, that it does not act on it."""
    master, notices = _load(
        tmp_path,
        """resource_manager:
  type: agent
  default_aux_resource_pool: cpu
  default_compute_resource_pool: gpu
resource_pools:
  - pool_name: cpu
    max_slots: 4
  - pool_name: gpu
    max_slots: 8
    provider: {type: local, instance_type: cpu-2, instance_slots: 2}
""",
    )
    assert master.pool_names() == ["cpu", "gpu"]
    found = [n for n in notices if "max_slots" in n]
    assert len(found) == 2, notices
    assert found[0].startswith(f"{tmp_path / 'master.yaml'}:7: resource_pools[0].max_slots")
    assert "Determined loads the file and drops it" in found[0]
    assert ":9: resource_pools[1].max_slots" in found[1]
