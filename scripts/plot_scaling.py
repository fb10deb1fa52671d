#!/usr/bin/env python3
"""Plots `hypic bench scaling --json FILE`: a cold query's speed-up against the number of
workers, per dispatch policy, measured (the workers the run had) and simulated (up to 16).
Usage: plot_scaling.py FILE.json OUT.png
Takes: seconds (needs matplotlib)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    r = json.load(open(sys.argv[1]))
    if r.get("bench") != "scaling":
        raise SystemExit(f"plot_scaling: {sys.argv[1]} is not `hypic bench scaling --json` output")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    policies = []
    for row in r["rows"]:
        if row["policy"] not in policies:
            policies.append(row["policy"])
    workers_all = sorted({row["workers"] for row in r["rows"]})
    for i, policy in enumerate(policies):
        rows = sorted((x for x in r["rows"] if x["policy"] == policy), key=lambda x: x["workers"])
        colour = f"C{i}"
        ax.plot([x["workers"] for x in rows], [x["simulated_speedup"] for x in rows], "--",
                color=colour, label=f"{policy}, simulated")
        measured = [x for x in rows if "measured_speedup" in x]
        if measured:
            ax.plot([x["workers"] for x in measured], [x["measured_speedup"] for x in measured],
                    "o", color=colour, markersize=8, label=f"{policy}, measured")
    ax.plot(workers_all, workers_all, ":", color="grey", label="linear")
    ax.set_xscale("log", base=2)
    ax.set_xticks(workers_all)
    ax.set_xticklabels([str(w) for w in workers_all])
    ax.set_ylim(0, max(3.0, 1.1 * max(x["simulated_speedup"] for x in r["rows"])))
    ax.set_xlabel("workers")
    ax.set_ylabel("speed-up of the cold query's TTFT")
    ax.set_title(f"{r['tokens']} tokens in {len(r['segments'])} segments, "
                 f"{r['arch']} preset {r['preset']}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
