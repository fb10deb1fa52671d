#!/usr/bin/env python3
"""Plots `hypic bench qps --json FILE`: TTFT p50 and p99 per mode against the offered load,
with the SLA and each mode's sustainable QPS. Usage: plot_qps.py FILE.json OUT.png
Takes: seconds (needs matplotlib)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, out):
    with open(src) as f:
        run = json.load(f)
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, mode in enumerate(run["modes"]):
        color = f"C{i}"
        rates = [p["rate_qps"] for p in mode["points"]]
        ax.plot(rates, [p["ttft_p99_ms"] for p in mode["points"]], "o-", color=color,
                label=f"{mode['mode']} p99 (sustainable {mode['sustainable_qps']:.2f} qps)")
        ax.plot(rates, [p["ttft_p50_ms"] for p in mode["points"]], "x--", color=color,
                alpha=0.6, label=f"{mode['mode']} p50")
        if mode["sustainable_qps"] > 0:
            ax.axvline(mode["sustainable_qps"], color=color, linestyle=":", alpha=0.6)
    ax.axhline(run["sla_ms"], color="black", linestyle="-.", label=f"SLA {run['sla_ms']:.0f} ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("offered load (queries per second, Poisson)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title(f"hypic bench qps: {run['arch']} preset {run['preset']}, "
                 f"{run['segments_min']}-{run['segments_max']} x {run['segment_tokens']} tokens, "
                 f"cold {100 * run['cold_share']:.0f} %, seed {run['seed']}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot written to {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
