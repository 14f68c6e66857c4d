"""PNG plots of a simulated day, one picture per figure, every policy in it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

MARKET_COLORS = {"reserved": "#2b8a3e", "spot": "#f59f00", "on_demand": "#1c7ed6"}


def draw(runs: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Write the four plots of ``runs`` (each ``{"policy", "series"}``) into ``out_dir``;
    returns their paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [
        _markets(plt, runs, out_dir / "instances-by-market.png"),
        _lines(plt, runs, "queue_depth", "requests waiting", out_dir / "queue-depth.png"),
        _lines(plt, runs, "cost_usd", "USD spent so far", out_dir / "cost-accumulated.png"),
        _ttc(plt, runs, out_dir / "time-to-capacity.png"),
    ]
    return paths


def _hours(series: dict[str, Any]) -> list[float]:
    return [t / 3600.0 for t in series["t_s"]]


def _markets(plt: Any, runs: Sequence[dict[str, Any]], path: Path) -> Path:
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), sharex=True)
    axes = axes if len(runs) > 1 else [axes]
    for ax, run in zip(axes, runs, strict=True):
        s = run["series"]
        markets = s["instances_by_market"]
        ax.stackplot(
            _hours(s),
            *[markets[m] for m in MARKET_COLORS],
            labels=list(MARKET_COLORS),
            colors=list(MARKET_COLORS.values()),
            alpha=0.85,
        )
        ax.set_ylabel("instances")
        ax.set_title(run["policy"], loc="left", fontsize=10)
        ax.legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("hour of the day")
    fig.suptitle("Instances by market")
    return _save(plt, fig, path)


def _lines(plt: Any, runs: Sequence[dict[str, Any]], key: str, label: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    for run in runs:
        ax.plot(_hours(run["series"]), run["series"][key], label=run["policy"])
    ax.set_xlabel("hour of the day")
    ax.set_ylabel(label)
    return _save(plt, fig, path, ax)


def _ttc(plt: Any, runs: Sequence[dict[str, Any]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    for run in runs:
        values = [max(v, 1.0) for v in run["series"]["time_to_capacity_s"]]
        if not values:
            continue
        shares = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, shares, where="post", label=f"{run['policy']} ({len(values)})")
    ax.set_xscale("log")
    ax.set_xlabel("time to capacity (s, log scale)")
    ax.set_ylabel("share of requests that got capacity")
    return _save(plt, fig, path, ax)


def _save(plt: Any, fig: Any, path: Path, ax: Any = None) -> Path:
    """Write the figure to ``path`` and close it; ``ax``: one plot's, given its legend and
    grid."""
    if ax is not None:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
