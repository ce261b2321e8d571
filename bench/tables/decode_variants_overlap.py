#!/usr/bin/env python3
"""How far a bench_decode_variants run's cases overlap their reads with their arithmetic: per
case, its time per step next to its two roofs (its bytes over the read probe, its multiply-adds
over the FMA probe, both taken next to it), and its time over their sum and over the larger.
A kernel that overlaps the two runs near the larger (over max about 1); one whose reads wait for
its arithmetic, or the other way round, near the sum (over sum about 1). The FMA roof counts
multiply-adds only: conversions, reductions and the softmax are not in it, so a case whose time
passes the sum spends time on those. DRAM-resident cases only (as decode_variants_targets.py).
Usage: decode_variants_overlap.py run.json"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_variants_table import VARIANTS, load  # noqa: E402
from decode_variants_targets import last_level_cache  # noqa: E402


UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def main(path):
    context, runs = load(path)
    llc = last_level_cache(context)
    print(f"CPU: {context.get('cpu_model', '?')}; DRAM-resident cases (at least {2 * llc / 1e6:.0f} MB per step); ms per step\n")
    print("| layout | T | L | batch | variant | time | read roof | FMA roof | over sum | over max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    order = {v: i for i, v in enumerate(VARIANTS)}
    for key in sorted(runs, key=lambda k: (order.get(k[4], len(order)), k[0], k[1], k[2], k[3])):
        r = runs[key]
        if r["MB_per_step"] * 1e6 < 2 * llc:
            continue
        layout, element, length, batch, variant = key
        time_ms = r["real_time"] * UNIT_MS[r.get("time_unit", "ns")]
        read_ms = r["MB_per_step"] / r["read_probe_GB_per_s"]
        fma_ms = r["MFMA_per_step"] / r["fma_probe_GFMA_per_s"]
        print(f"| {layout} | {element} | {length} | {batch} | {variant} | {time_ms:.1f} | {read_ms:.1f} | {fma_ms:.1f} "
              f"| {time_ms / (read_ms + fma_ms):.2f} | {time_ms / max(read_ms, fma_ms):.2f} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
