"""The picture of `python -m bench.autoscale`: lag and lanes over time, scaling on against off, the burst shaded.
Needs matplotlib (in the dev extras: `make setup` installs it)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = {"on": "tab:blue", "off": "tab:orange"}


def plot(doc: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = doc["config"]
    fig, (lag_ax, lanes_ax) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True,
                                           gridspec_kw={"height_ratios": [3, 2]})
    for ax in (lag_ax, lanes_ax):
        ax.axvspan(c["warmup_s"], c["warmup_s"] + c["burst_s"], color="grey", alpha=0.15,
                   label=f"burst ({c['burst_factor']:g}x)" if ax is lag_ax else None)
        ax.grid(alpha=0.3)
    for name, mode in doc["modes"].items():
        s = [p for p in mode["series"]]
        colour = COLOURS.get(name)
        drain = f", drained at {mode['drain_s']:.0f} s" if mode.get("drain_s") is not None else ", never drained"
        lag_ax.plot([p["t"] for p in s if p["lag"] is not None], [p["lag"] for p in s if p["lag"] is not None],
                    color=colour, label=f"{name}: lag{drain}, {mode['core_s']:.0f} core s")
        lanes_ax.step([p["t"] for p in s if p["lanes"] is not None], [p["lanes"] for p in s if p["lanes"] is not None],
                      where="post", color=colour, label=f"{name}: lanes copying")
        if any(p.get("decided") is not None for p in s):
            lanes_ax.step([p["t"] for p in s if p.get("decided") is not None],
                          [p["decided"] for p in s if p.get("decided") is not None], where="post", color=colour,
                          linestyle=":", label=f"{name}: lanes decided")
        lanes_ax.step([p["t"] for p in s], [p["cores"] for p in s], where="post", color=colour, alpha=0.35,
                      linestyle="--", label=f"{name}: executor cores held")
    lag_ax.set_ylabel("lag (records)")
    lag_ax.legend(fontsize=8, loc="upper right")
    lanes_ax.set_ylabel("lanes / cores")
    lanes_ax.set_xlabel("seconds since the warm-up began")
    lanes_ax.legend(fontsize=8, loc="upper right")
    lanes_ax.yaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(f"sparkmirror autoscaling: {c['rate_records']:,} records/s, {c['burst_factor']:g}x for "
                 f"{c['burst_s']:g} s; scaling on against {c['off_lanes']} fixed lane(s)", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
