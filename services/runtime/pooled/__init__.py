"""Pooled work at run time: machine pools and Determined resource pools behind one interface.

Layers, top to bottom (import-linter holds them):

- ``registry`` (apply, list, delete pools; the view routing reads), ``launching`` (one pooled
  machine up through the one launch path), ``passes`` (enqueue, the compare-and-set pass,
  sync, rebalancing): generic, written once for both kinds.
- ``kind_registry``: which implementation serves a registered pool.
- ``machine_pool``, ``determined``: the two implementations of :class:`pool_kind.PoolKind`.
- ``pool_kind``: the interface; ``work``: what both hand to warm machines (assignments) and the
  request and instance records of pooled work.
"""
