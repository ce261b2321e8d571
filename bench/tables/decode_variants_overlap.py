#!/usr/bin/env python3
"""How far a bench_decode_variants run's cases overlap their reads with their arithmetic: per
case, its time per step next to its two roofs (its bytes over the read probe, its multiply-adds
over the FMA probe, both taken next to it), and its time over their sum and over the larger.
A kernel that overlaps the two runs near the larger (over max about 1); one whose reads wait for
its arithmetic, or the other way round, near the sum (over sum about 1). The FMA roof counts
multiply-adds only: conversions, reductions and the softmax are not in it, so a case whose time
passes the sum spends time on those. DRAM-resident cases only (as decode_variants_targets.py).
With several runs each figure is the range over them; a last table sums up each variant's
ratios over every layout, float, 16-bit and int8 apart.
Usage: decode_variants_overlap.py run.json [run.json ...]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_variants_table import VARIANTS, load  # noqa: E402
from decode_variants_targets import dram_resident_keys, last_level_cache, span  # noqa: E402

UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
KINDS = {"f32": "f32", "f16": "16-bit", "bf16": "16-bit", "i8": "int8"}


def figures(r):
    """(time, read roof, FMA roof, over sum, over max) of one case, in ms."""
    time_ms = r["real_time"] * UNIT_MS[r.get("time_unit", "ns")]
    read_ms = r["MB_per_step"] / r["read_probe_GB_per_s"]
    fma_ms = r["MFMA_per_step"] / r["fma_probe_GFMA_per_s"]
    return time_ms, read_ms, fma_ms, time_ms / (read_ms + fma_ms), time_ms / max(read_ms, fma_ms)


def main(paths):
    loaded = [load(p) for p in paths]
    llc = min(last_level_cache(c) for c, _ in loaded)
    runs = [r for _, r in loaded]
    order = {v: i for i, v in enumerate(VARIANTS)}
    keys = sorted(dram_resident_keys(runs, llc), key=lambda k: (order.get(k[4], len(order)), k[0], k[1], k[2], k[3]))
    print(f"CPU: {loaded[0][0].get('cpu_model', '?')}; {len(paths)} run(s); DRAM-resident cases (at least "
          f"{2 * llc / 1e6:.0f} MB per step); ms per step\n")
    print("| layout | T | L | batch | variant | time | read roof | FMA roof | over sum | over max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for key in keys:
        layout, element, length, batch, variant = key
        each = [figures(r[key]) for r in runs]
        cells = [span([f[i] for f in each], 2 if i > 2 else 1) for i in range(5)]
        print(f"| {layout} | {element} | {length} | {batch} | {variant} | " + " | ".join(cells) + " |")
        kind = summary.setdefault((variant, KINDS.get(element, element)), ([], []))
        kind[0].extend(f[3] for f in each)
        kind[1].extend(f[4] for f in each)
    kinds = ["f32", "16-bit", "int8"]
    print("\nEvery layout, the range over cases and runs:\n")
    print("| variant | over sum: " + " | ".join(kinds) + " | over max: " + " | ".join(kinds) + " |")
    print("|---" * (1 + 2 * len(kinds)) + "|")
    for v in VARIANTS:
        sums = [span(summary[(v, k)][0]) if (v, k) in summary else "-" for k in kinds]
        maxes = [span(summary[(v, k)][1]) if (v, k) in summary else "-" for k in kinds]
        print(f"| {v} | " + " | ".join(sums + maxes) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
