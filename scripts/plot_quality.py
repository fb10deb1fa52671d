#!/usr/bin/env python3
"""Plots answer quality per caching mode from `hypic eval` runs: each mode's score difference
to full recompute with its 95 % bootstrap interval over questions (summary.json's
delta_vs_full and delta_ci95), one panel per dataset.
Usage: plot_quality.py OUT.png RUN_DIR_OR_SUMMARY_JSON [...]
Takes: seconds (needs matplotlib)."""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(arg):
    p = pathlib.Path(arg)
    return json.loads((p / "summary.json" if p.is_dir() else p).read_text())


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out = sys.argv[1]
    by_dataset = {}
    for arg in sys.argv[2:]:
        s = load(arg)
        for m in s["modes"]:
            if m["mode"] == "full":
                continue
            w = s.get("junction")
            name = m["mode"] if w in (None, "8") or m["mode"] == "prefix" else f"{m['mode']} (W={w})"
            by_dataset.setdefault((s["dataset"], s.get("metric_label", s["metric"]),
                                   s["examples"]), []).append((name, m))
    fig, axes = plt.subplots(1, len(by_dataset), figsize=(5.2 * len(by_dataset), 3.6),
                             squeeze=False)
    for ax, ((dataset, metric, n), modes) in zip(axes[0], by_dataset.items()):
        names = [name for name, _ in modes]
        deltas = [100 * (m.get("delta_vs_full") or 0.0) for _, m in modes]
        lo = [d - 100 * m["delta_ci95"][0] if m.get("delta_ci95") else 0 for d, (_, m) in
              zip(deltas, modes)]
        hi = [100 * m["delta_ci95"][1] - d if m.get("delta_ci95") else 0 for d, (_, m) in
              zip(deltas, modes)]
        ax.bar(names, deltas, color=["#4c72b0" if d >= -1 else "#c44e52" for d in deltas])
        ax.errorbar(names, deltas, yerr=[lo, hi], fmt="none", ecolor="black", capsize=4)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.axhspan(-1, 1, color="grey", alpha=0.15, label="within a point of full")
        ax.set_ylabel(f"{metric} − full (points, 95 % interval)")
        ax.set_title(f"{dataset}: {n} examples")
        ax.tick_params(axis="x", labelsize=8)
        ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
