#!/usr/bin/env python3
"""Figures of a `hypic eval` run folder.
Takes: seconds (needs matplotlib).

Reads DIR/summary.json and the per-mode prediction files it names, and writes into DIR:
  score_per_mode.png  the dataset's metric per mode (×100), Δ against full as labels
  ttft_per_mode.png   TTFT p50 per mode, with the p99 as a bar on top
  ttft_cdf.png        the cumulative distribution of per-question TTFT, one line per mode

Usage:  python3 scripts/plot_eval.py DIR
Needs:  pip install matplotlib   (the C++ build and tests do not use this script)
"""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    ttfts = {}
    for m in summary["modes"]:
        path = pathlib.Path(m["predictions"])
        if not path.is_absolute() and not path.exists():
            path = run_dir / m["mode"] / path.name
        values = []
        with open(path) as f:
            for line in f:
                if line.strip():
                    values.append(json.loads(line)["ttft_ms"])
        ttfts[m["mode"]] = sorted(values)
    return summary, ttfts


def plot_scores(summary, out):
    modes = [m["mode"] for m in summary["modes"]]
    scores = [100 * m["score"] for m in summary["modes"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bars = ax.bar(modes, scores, color="#4c72b0")
    for bar, m in zip(bars, summary["modes"]):
        d = m.get("delta_vs_full")
        label = f"{100 * m['score']:.1f}" + ("" if d is None else f"\nΔ {100 * d:+.1f}")
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel(f"{summary.get('metric_label', summary['metric'])} (×100)")
    ax.set_title(f"{summary['dataset']}: score per mode ({summary['examples']} examples)")
    ax.set_ylim(0, max(scores + [1]) * 1.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_ttft(summary, out):
    modes = [m["mode"] for m in summary["modes"]]
    p50 = [m["ttft_ms"]["p50"] for m in summary["modes"]]
    p99 = [m["ttft_ms"]["p99"] for m in summary["modes"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(modes, p50, color="#55a868", label="p50")
    ax.errorbar(modes, p50, yerr=[[0] * len(p50), [b - a for a, b in zip(p50, p99)]],
                fmt="none", ecolor="black", capsize=4, label="p99")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title(f"{summary['dataset']}: time to first token per mode")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_cdf(ttfts, summary, out):
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for mode, values in ttfts.items():
        if not values:
            continue
        n = len(values)
        ax.step(values, [(i + 1) / n for i in range(n)], where="post", label=mode)
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("share of questions")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{summary['dataset']}: TTFT distribution")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run_dir = pathlib.Path(sys.argv[1])
    if not (run_dir / "summary.json").exists():
        sys.exit(f"{run_dir}/summary.json not found (run `hypic eval --out {run_dir}` first)")
    summary, ttfts = load(run_dir)
    outputs = [run_dir / "score_per_mode.png", run_dir / "ttft_per_mode.png",
               run_dir / "ttft_cdf.png"]
    plot_scores(summary, outputs[0])
    plot_ttft(summary, outputs[1])
    plot_cdf(ttfts, summary, outputs[2])
    for p in outputs:
        print(f"wrote {p}")


if __name__ == "__main__":
    main()
