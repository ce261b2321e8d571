#!/usr/bin/env python3
"""Turns Google Benchmark JSON from bench_decode into Markdown tables: time per decode step,
achieved GB/s and fraction of the read bandwidth measured in the same run, and each variant's
speed-up over MHA at the same shape (ratios within one run)."""
import json
import re
import sys
from collections import defaultdict

VARIANT = re.compile(r"BM_Decode<polyattn::(\w+(?:<\d+>)?), polyattn::(\w+(?:<\d+>)?)>")
ARG = re.compile(r"(\w+):(\d+)")


def main(path):
    data = json.load(open(path))
    bandwidth = None
    rows = defaultdict(dict)  # (layout, heads, L, batch) -> variant -> run
    for run in data["benchmarks"]:
        if run["name"].startswith("BM_ReadBandwidth"):
            bandwidth = run["GB_per_s"]
            continue
        m = VARIANT.search(run["name"])
        if not m or run.get("run_type") == "aggregate":
            continue
        args = dict((k, int(v)) for k, v in ARG.findall(run["name"]) if k in ("heads", "L", "batch"))
        rows[(m.group(2), args["heads"], args["L"], args["batch"])][m.group(1)] = run
    print(f"Read bandwidth measured in this run: {bandwidth:.1f} GB/s\n" if bandwidth else "")
    variants = ["Mha", "Gqa<2>", "Mqa"]
    print("| layout | d_model (heads x 64) | L | batch | " + " | ".join(
        f"{v} us (GB/s, of bw)" for v in variants) + " | MHA/GQA2 | MHA/MQA |")
    print("|" + "---|" * (4 + len(variants) + 2))
    for key in sorted(rows, key=lambda k: (k[0] != "Nhd", k)):
        layout, heads, length, batch = key
        cells = []
        for v in variants:
            r = rows[key].get(v)
            cells.append(f"{r['real_time']:.0f} ({r['GB_per_s']:.1f}, {r['of_read_bw']:.2f})" if r else "-")
        mha = rows[key].get("Mha")
        ratios = []
        for v in ("Gqa<2>", "Mqa"):
            r = rows[key].get(v)
            ratios.append(f"{mha['real_time'] / r['real_time']:.2f}x" if mha and r else "-")
        print(f"| {layout} | {heads * 64} ({heads}) | {length} | {batch} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/bench/decode.json")
