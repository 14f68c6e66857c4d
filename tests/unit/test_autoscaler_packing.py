"""Bin packing by shape and count: exact units, run splitting, the type score, STRICT_SPREAD."""

from __future__ import annotations

import time

from corral.shared.autoscaler.packing import (
    Bin,
    ResourceIndex,
    Room,
    ShapeCount,
    TypeOption,
    choose_new_nodes,
    fit_count,
    pack,
    place_strict_spread,
)

INDEX = ResourceIndex(["CPU", "GPU", "Custom1"])


def shape(count: int, **resources: float) -> ShapeCount:
    s = INDEX.shape(resources)
    return ShapeCount(s, count, needs_gpu="GPU" in resources, weight=sum(resources.values()))


def vec(**resources: float) -> list[int]:
    return INDEX.vector(resources)


def option(name: str, order: int, room: int = 100, **resources: float) -> TypeOption:
    return TypeOption(name, vec(**resources), resources.get("GPU", 0) > 0, order, room)


def test_fractions_add_up_exactly() -> None:
    # Ten 0.1-CPU bundles fill one CPU exactly; floats would leave 0.9999999999999999.
    assert fit_count(vec(CPU=1), INDEX.shape({"CPU": 0.1})) == 10
    assert fit_count(vec(CPU=0.3), INDEX.shape({"CPU": 0.1})) == 3
    assert fit_count(vec(CPU=4, GPU=1), INDEX.shape({"CPU": 1, "GPU": 1})) == 1
    assert fit_count(vec(CPU=4), INDEX.shape({"CPU": 1, "GPU": 1})) == 0


def test_packing_a_shape_onto_a_run_splits_it() -> None:
    run = Bin("t", vec(CPU=4), 5, False)
    bins = [run]
    demand = shape(10, CPU=1)  # 4 per node: two full nodes, one with 2, two untouched
    pack([demand], bins)
    assert demand.count == 0
    layout = sorted((b.count, b.placed.get(demand.shape, 0)) for b in bins)
    assert layout == [(1, 2), (2, 0), (2, 4)]
    assert sum(b.count for b in bins) == 5


def test_gpu_work_goes_in_first_and_cpu_work_tries_cpu_nodes_first() -> None:
    gpu_node = Bin("g", vec(CPU=8, GPU=1), 1, True, "g")
    cpu_node = Bin("c", vec(CPU=4), 1, False, "c")
    bins = [gpu_node, cpu_node]
    cpu, gpu = shape(6, CPU=1), shape(1, CPU=4, GPU=1)
    pack([cpu, gpu], bins)
    assert gpu_node.placed == {gpu.shape: 1, cpu.shape: 2}
    assert cpu_node.placed == {cpu.shape: 4}
    assert cpu.count == 0 and gpu.count == 0


def test_new_nodes_come_as_runs_of_identical_fills() -> None:
    options = [option("small", 0, CPU=4), option("big", 1, CPU=16)]
    demand = shape(100, CPU=1)
    choices = choose_new_nodes([demand], options, Room(1000), "pending")
    assert [(c.bin.node_type, c.bin.count, c.bin.placed[demand.shape]) for c in choices] == [
        ("big", 6, 16),  # the type that absorbs the most, repeated while it can be filled
        ("small", 1, 4),  # the 4 left fit the smaller type exactly
    ]
    assert demand.count == 0


def test_type_rooms_and_the_global_room_bound_the_runs() -> None:
    options = [option("big", 0, room=2, CPU=16), option("small", 1, room=3, CPU=4)]
    demand = shape(100, CPU=1)
    room = Room(4)
    choices = choose_new_nodes([demand], options, room, "pending")
    assert [(c.bin.node_type, c.bin.count) for c in choices] == [("big", 2), ("small", 2)]
    assert room.total == 0
    assert demand.count == 100 - 32 - 8


def test_work_without_gpus_avoids_gpu_types_and_says_so() -> None:
    options = [option("gpu", 0, CPU=32, GPU=4), option("cpu", 1, CPU=8)]
    choices = choose_new_nodes([shape(8, CPU=1)], options, Room(10), "pending")
    assert [c.bin.node_type for c in choices] == ["cpu"]
    assert choices[0].kept_off_gpu == ["gpu"]


def test_plainer_type_wins_a_tie_so_custom_resources_stay_free() -> None:
    options = [option("custom", 0, CPU=4, Custom1=1), option("plain", 1, CPU=4)]
    choices = choose_new_nodes([shape(2, CPU=2)], options, Room(10), "pending")
    assert [c.bin.node_type for c in choices] == ["plain"]


def test_strict_spread_uses_distinct_nodes_of_a_run() -> None:
    run = Bin("t", vec(CPU=8), 2, False)
    bins = [run]
    group = [shape(1, CPU=1) for _ in range(3)]
    new = place_strict_spread(group, bins, [option("t", 0, CPU=8)], Room(10), "pg")
    assert new is not None and len(new) == 1  # two on the run's two nodes, one new node
    holders = [b for b in bins if b.placed]
    assert sorted(b.count for b in holders) == [1, 1, 1]


def test_strict_spread_changes_nothing_when_it_cannot_finish() -> None:
    node = Bin("t", vec(CPU=8), 1, False, "n1")
    bins = [node]
    group = [shape(1, CPU=1) for _ in range(3)]
    room = Room(1)
    assert place_strict_spread(group, bins, [option("t", 0, CPU=8)], room, "pg") is None
    assert bins == [node] and node.placed == {} and room.total == 1


def test_ten_thousand_bundles_of_five_shapes_pack_in_well_under_a_second() -> None:
    options = [option(f"t{i}", i, CPU=2 ** (i % 6), GPU=i % 3) for i in range(20)]
    nodes = [
        Bin(f"t{i % 20}", vec(CPU=2 ** (i % 6), GPU=i % 3), 1, i % 3 > 0, f"n{i}")
        for i in range(1000)
    ]
    demand = [
        shape(4000, CPU=1),
        shape(3000, CPU=2),
        shape(2000, CPU=0.5),
        shape(600, CPU=4, GPU=1),
        shape(400, CPU=1, GPU=2),
    ]
    start = time.perf_counter()
    pack(demand, nodes)
    choose_new_nodes(demand, options, Room(100_000), "pending")
    elapsed_s = time.perf_counter() - start
    assert sum(s.count for s in demand) == 0
    assert elapsed_s < 1.0, elapsed_s
