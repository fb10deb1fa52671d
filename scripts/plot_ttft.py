#!/usr/bin/env python3
"""Plots `hypic bench ttft --segments a,b,c --json FILE`: TTFT p50 per mode and the
prefix/pic and full/pic ratios against the prompt length. Usage: plot_ttft.py FILE.json OUT.png
Takes: seconds (needs matplotlib)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, out):
    with open(src) as f:
        run = json.load(f)
    points = run.get("points") or [run]
    tokens = [p["prompt_tokens"] for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    modes = [m for m in ("full", "prefix", "pic", "pic-addition") if m in points[0]["modes"]]
    for mode in modes:
        left.plot(tokens, [p["modes"][mode]["ttft_ms"]["p50"] for p in points], "o-", label=mode)
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("prompt tokens")
    left.set_ylabel("TTFT p50 (ms)")
    left.set_title("time to first token")
    left.grid(True, which="both", alpha=0.3)
    left.legend()
    for key, label in (("ratio_prefix_over_pic_p50", "prefix / pic"),
                       ("ratio_full_over_pic_p50", "full / pic")):
        if all(key in p for p in points):
            right.plot(tokens, [p[key] for p in points], "o-", label=label)
    right.set_xscale("log", base=2)
    right.set_xlabel("prompt tokens")
    right.set_ylabel("TTFT p50 ratio (x)")
    right.set_title("speed-up of pic")
    right.grid(True, which="both", alpha=0.3)
    right.legend()
    fig.suptitle(f"hypic bench ttft: {run['arch']} preset {run['preset']}, "
                 f"{run['segment_tokens']}-token segments, junction {run['junction']}")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot written to {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
