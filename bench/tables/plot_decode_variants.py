#!/usr/bin/env python3
"""Plots of a bench_decode_variants run (Google Benchmark JSON; with repetitions, each case's
median): decode time against L per variant (log-log), cache bytes per token per variant and
element type, and achieved GB/s against the read probe measured in the same run.
Usage: plot_decode_variants.py run.json out_dir [layout] [batch]   (defaults: Hnd, 16)
Needs Debian's python3-matplotlib."""
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_variants_table import VARIANTS, load  # noqa: E402

ELEMENTS = ["f32", "f16", "bf16", "i8"]
MARKERS = {"f32": "o", "f16": "s", "bf16": "^", "i8": "x"}
LINES = {"f32": "-", "f16": "--", "bf16": ":", "i8": "-."}


def title(context, what):
    return f"{what}\n{context.get('cpu_model', '?')}, 2 threads"


def time_vs_length(context, runs, layout, batch, path):
    fig, ax = plt.subplots(figsize=(7, 5))
    for color, v in enumerate(VARIANTS):  # one colour per variant, one line style per element type
        for e in ELEMENTS:
            points = sorted((k[2], r["real_time"]) for k, r in runs.items() if k[0] == layout and k[1] == e and k[3] == batch and k[4] == v)
            if points:
                ax.plot(*zip(*points), color=f"C{color}", marker=MARKERS[e], linestyle=LINES[e], label=f"{v} {e}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("cached tokens L")
    ax.set_ylabel("decode step (us)")
    ax.set_title(title(context, f"One decode step, {layout}, batch {batch}, 6 heads of 64"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def present(runs):
    """The element types the run has (a filtered run may lack some)."""
    return [e for e in ELEMENTS if any(k[1] == e for k in runs)]


def bytes_per_token(context, runs, path):
    fig, ax = plt.subplots(figsize=(7, 4))
    elements = present(runs)
    width = 0.8 / len(elements)
    for i, e in enumerate(elements):
        values = [next((r["cache_B_per_token"] for k, r in runs.items() if k[1] == e and k[4] == v), 0) for v in VARIANTS]
        ax.bar([x + (i - (len(elements) - 1) / 2) * width for x in range(len(VARIANTS))], values, width, label=e)
    ax.set_xticks(range(len(VARIANTS)), VARIANTS)
    ax.set_ylabel("cache bytes per token (one layer)")
    ax.set_title("Cache bytes per token, 6 heads of 64 (d = 384, Whisper tiny)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def bandwidth(context, runs, layout, batch, path):
    length = max(k[2] for k in runs if k[0] == layout and k[3] == batch)
    fig, ax = plt.subplots(figsize=(7, 4))
    elements = present(runs)
    width = 0.8 / len(elements)
    for i, e in enumerate(elements):
        values = [runs[(layout, e, length, batch, v)]["GB_per_s"] if (layout, e, length, batch, v) in runs else 0 for v in VARIANTS]
        ax.bar([x + (i - (len(elements) - 1) / 2) * width for x in range(len(VARIANTS))], values, width, label=e)
    probe = float(context.get("read_probe_GB_per_s", 0))
    ax.axhline(probe, color="black", linestyle="--", label=f"read probe {probe:.1f} GB/s")
    ax.set_xticks(range(len(VARIANTS)), VARIANTS)
    ax.set_ylabel("cache bytes read per second (GB/s)")
    ax.set_title(title(context, f"Achieved bandwidth, {layout}, L {length}, batch {batch}"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(path, out_dir, layout="Hnd", batch="16"):
    context, runs = load(path)
    os.makedirs(out_dir, exist_ok=True)
    time_vs_length(context, runs, layout, int(batch), os.path.join(out_dir, "decode_time_vs_length.png"))
    bytes_per_token(context, runs, os.path.join(out_dir, "cache_bytes_per_token.png"))
    bandwidth(context, runs, layout, int(batch), os.path.join(out_dir, "decode_bandwidth.png"))


if __name__ == "__main__":
    main(*sys.argv[1:5])
