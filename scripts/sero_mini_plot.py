"""The figure of `scripts/compare_sero_mini.py`: one row per variant, seed means +- std of each arm's curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

EVALS = ("train_success", "heldout_success", "heldout_p_click_right", "heldout_p_buy_right", "heldout_p_back_wrong")
CURVES = ("sero_succeeded", "env_steps")


def plot(result: dict[str, Any], png: Path) -> None:
    """Train / rotated held-out success, the three held-out probes, rescues per step and cumulative env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v, x in result["variants"].items() if x["runs"]]
    if not variants:
        return
    panels = (*EVALS, *CURVES)
    fig, axes = plt.subplots(len(variants), len(panels), figsize=(3.3 * len(panels), 3.1 * len(variants)),
                             squeeze=False)  # fmt: skip
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    arms = list(dict.fromkeys(r["arm"] for v in variants for r in result["variants"][v]["runs"]))
    for row, variant in zip(axes, variants, strict=True):
        runs = result["variants"][variant]["runs"]
        for ax, key in zip(row, panels, strict=True):
            for i, arm in enumerate(arms):
                rs = [r for r in runs if r["arm"] == arm]
                if not rs or (key == "sero_succeeded" and not any(key in c for r in rs for c in r["curves"])):
                    continue
                if key in EVALS:
                    n = min(len(r["evals"]) for r in rs)
                    xs = np.array([e["step"] for e in rs[0]["evals"][:n]])
                    ys = np.array([[e[key] for e in r["evals"][:n]] for r in rs])
                else:
                    n = min(len(r["curves"]) for r in rs)
                    xs = np.arange(1, n + 1)
                    ys = np.array([[c.get(key, 0.0) for c in r["curves"][:n]] for r in rs])
                    ys = np.cumsum(ys, axis=1) if key == "env_steps" else ys
                m, sd = ys.mean(axis=0), ys.std(axis=0)
                ax.plot(xs, m, color=colours[i % len(colours)], label=f"{arm} ({len(rs)})")
                ax.fill_between(xs, m - sd, m + sd, color=colours[i % len(colours)], alpha=0.12)
            ax.set_title(f"{variant}: {'cumulative env_steps' if key == 'env_steps' else key}", fontsize=8)
            ax.set_xlabel("step", fontsize=8)
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=6)
    fig.suptitle("MiniShop (rotated held-out), one committed start, same seeds and tasks: does SERO help?")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
