#!/usr/bin/env python3
"""Markdown tables from bench_slim's JSON: decode step per variant (time, achieved GB/s and
fraction of the read bandwidth measured in the same run, speed-up over MHA), and the Whisper
cross-attention step per cache option at batch 64 against the seed's memory-read model."""
import json
import re
import sys
from collections import defaultdict

SELF = re.compile(r"BM_SelfDecode<polyattn::(\w+)>")
CROSS = re.compile(r"BM_CrossStep<polyattn::cross::(\w+)>")
ARG = re.compile(r"(\w+):(\d+)")


def main(path):
    data = json.load(open(path))
    bw = None
    selfs = defaultdict(dict)
    cross = defaultdict(dict)
    for run in data["benchmarks"]:
        if run.get("run_type") == "aggregate":
            continue
        if run["name"].startswith("BM_ReadBandwidth"):
            bw = run["GB_per_s"]
            continue
        args = {k: int(v) for k, v in ARG.findall(run["name"])}
        m = SELF.search(run["name"])
        if m:
            selfs[(args["heads"], args["L"], args["batch"])][m.group(1)] = run
        m = CROSS.search(run["name"])
        if m:
            cross[args["heads"]][m.group(1)] = run
    if bw:
        print(f"Read bandwidth measured in this run: {bw:.1f} GB/s\n")
    variants = ["Mha", "SlimK2", "XCache", "SlimK1"]
    print("| d (heads x 64) | L | batch | " + " | ".join(f"{v} us (GB/s, of bw)" for v in variants) +
          " | MHA/SlimK2 | MHA/XCache | MHA/SlimK1 |")
    print("|" + "---|" * (3 + len(variants) + 3))
    for key in sorted(selfs):
        heads, length, batch = key
        row = selfs[key]
        cells = [f"{row[v]['real_time']:.0f} ({row[v]['GB_per_s']:.1f}, {row[v]['of_read_bw']:.2f})" if v in row else "-"
                 for v in variants]
        mha = row.get("Mha")
        ratios = [f"{mha['real_time'] / row[v]['real_time']:.2f}x" if mha and v in row else "-"
                  for v in ("SlimK2", "XCache", "SlimK1")]
        print(f"| {heads * 64} ({heads}) | {length} | {batch} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    if cross:
        print("\nWhisper cross-attention, all decoder layers, one token, batch 64, p = 1500:\n")
        print("| model | option | ms/step | cache MB/seq | model MB/step (E re-read per layer) | measured speed-up vs baseline |"
              " model speed-up (E re-read) | model speed-up (E on chip) |")
        print("|---|---|---|---|---|---|---|---|")
        for heads in sorted(cross):
            base = cross[heads].get("Baseline")
            for opt in ("Baseline", "KOnly", "SharedE", "Hybrid"):
                r = cross[heads].get(opt)
                if not r:
                    continue
                meas = base["real_time"] / r["real_time"] if base else float("nan")
                m1 = base["model_MB_per_step"] / r["model_MB_per_step"] if base else float("nan")
                m2 = base["model_MB_if_on_chip"] / r["model_MB_if_on_chip"] if base else float("nan")
                name = "tiny" if heads == 6 else "base"
                print(f"| {name} | {opt} | {r['real_time']:.1f} | {r['cache_MB_per_seq']:.2f} | {r['model_MB_per_step']:.0f} | "
                      f"{meas:.2f}x | {m1:.2f}x | {m2:.2f}x |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/bench/slim.json")
