#!/usr/bin/env python3
"""Checks bench_decode_variants runs against the CPU kernel issue's targets, over the
DRAM-resident cases only (the cache a step reads is at least twice the last-level cache that the
run's JSON context reports): each case's fraction of its roofline (target: at least 0.80), and,
where both cases of a pair are memory-bound in every run, their time ratio against their byte
ratio (target: within 15%): SlimK2, XCache and MQA against MHA, 16-bit against float.
With several runs (e.g. two runs of the same binary on a VM whose bandwidth drifts) each figure
is the range over the runs, each run's median of repetitions; a target counts as met only where
every run meets it. With --probe-below GBPS, only the repetitions whose read probe (taken next to
them) read below GBPS count: the low-bandwidth state of a VM whose bandwidth switches between two.
Usage: decode_variants_targets.py [--probe-below GBPS] run.json [run.json ...]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_variants_table import VARIANTS, load  # noqa: E402

PAIRS = [("SlimK2", "Mha"), ("XCache", "Mha"), ("Mqa", "Mha")]
ROOF_TARGET, RATIO_TOLERANCE = 0.80, 0.15


def last_level_cache(context):
    return max((c["size"] for c in context.get("caches", [])), default=0)


def dram_resident_keys(runs, llc, in_any_run=False):
    """The cases whose step reads at least twice the last-level cache `llc` (bytes), sorted: those
    present in every run, or with in_any_run in any."""
    present = any if in_any_run else all
    return sorted(k for k in {k for r in runs for k in r} if present(k in r for r in runs)
                  and next(r for r in runs if k in r)[k]["MB_per_step"] * 1e6 >= 2 * llc)


def span(values, digits=2):
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f}" if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else f"{lo:.{digits}f}-{hi:.{digits}f}"


def mark(oks):
    return " ok" if all(oks) else (" (ok)" if any(oks) else "")


def main(paths, probe_below=None):
    loaded = [load(p, probe_below) for p in paths]
    llc = min(last_level_cache(c) for c, _ in loaded)
    runs = [r for _, r in loaded]
    # With probe_below: the cases in any run, each figure over the runs that kept a repetition of it
    keys = dram_resident_keys(runs, llc, in_any_run=probe_below is not None)
    if probe_below is not None:
        print(f"Only repetitions whose read probe read below {probe_below:g} GB/s; '-': none in any run")
    probes = [float(c.get("read_probe_GB_per_s", 0)) for c, _ in loaded]
    fmas = [float(c.get("fma_probe_GFMA_per_s", 0)) for c, _ in loaded]
    print(f"CPU: {loaded[0][0].get('cpu_model')}; {len(paths)} run(s); last-level cache {llc / 2**20:.0f} MiB, so "
          f"DRAM-resident means at least {2 * llc / 1e6:.0f} MB per step; read probe {span(probes, 1)} GB/s, "
          f"FMA probe {span(fmas, 1)} GFMA/s")
    # Runs since 2026-11-30 judge each case against probes taken next to it (decode_variant_case.hpp)
    near = [(r[k]["read_probe_GB_per_s"], r[k]["fma_probe_GFMA_per_s"])
            for r in runs for k in keys if k in r and "fma_probe_GFMA_per_s" in r[k]]
    if near:
        print(f"Each case against the probes next to it: read {span([n[0] for n in near], 1)} GB/s, "
              f"FMA {span([n[1] for n in near], 1)} GFMA/s over the cases")
    print()
    # A case whose cache Linux left (partly) on 4 KiB pages ran on a different machine, in effect
    # (below 0.9: a buffer not aligned to 2 MiB keeps its first and last partial 2 MiB on 4 KiB pages,
    # 0.97-0.99 of the smallest DRAM-resident caches here)
    small_pages = sorted({k for r in runs for k in keys if k in r and 0 <= r[k].get("huge_page_share", 1) < 0.9})
    if small_pages:
        print("On 4 KiB pages in part (huge_page_share below 0.9 in some run): "
              + ", ".join("/".join(str(x) for x in k) for k in small_pages) + "\n")
    shapes = sorted({k[:4] for k in keys})
    print(f"Fraction of roofline, its range over the runs; M: memory-bound, C: compute-bound; "
          f"ok: at least {ROOF_TARGET:.2f} in every run, (ok): in some:\n")
    print("| layout | T | L | batch | " + " | ".join(VARIANTS) + " |")
    print("|" + "---|" * (4 + len(VARIANTS)))
    for shape in shapes:
        cells = []
        for v in VARIANTS:
            if shape + (v,) not in keys:
                cells.append("-")
                continue
            cases = [r[shape + (v,)] for r in runs if shape + (v,) in r]
            fractions = [c["of_roofline"] for c in cases]
            roofs = "".join(sorted({"M" if c["memory_bound"] else "C" for c in cases}))
            cells.append(f"{span(fractions)} {roofs}{mark([f >= ROOF_TARGET for f in fractions])}")
        print(f"| {' | '.join(str(x) for x in shape)} | " + " | ".join(cells) + " |")

    def ratio(a, b):
        """Time ratio a / b (range), the byte ratio, and whether it is within the tolerance."""
        if a not in keys or b not in keys:
            return "-"
        both = [r for r in runs if a in r and b in r]
        if not both:
            return "-"
        byte_ratio = both[0][a]["MB_per_step"] / both[0][b]["MB_per_step"]
        times = [r[a]["real_time"] / r[b]["real_time"] for r in both]
        cell = f"{span(times)} [{byte_ratio:.2f}]"
        if not all(r[a]["memory_bound"] and r[b]["memory_bound"] for r in both):
            return cell + " C"
        return cell + mark([abs(t / byte_ratio - 1) <= RATIO_TOLERANCE for t in times])

    print(f"\nTime ratios [byte ratios]; ok: within {RATIO_TOLERANCE:.0%} of the byte ratio in every run, "
          f"(ok): in some; C: a case of the pair is compute-bound (no bandwidth target):\n")
    print("| layout | T | L | batch | " + " | ".join(f"{v}/{b}" for v, b in PAIRS) + " | "
          + " | ".join(f"{v} T/f32" for v in VARIANTS) + " |")
    print("|" + "---|" * (4 + len(PAIRS) + len(VARIANTS)))
    for layout, element, length, batch in shapes:
        cells = [ratio((layout, element, length, batch, v), (layout, element, length, batch, b)) for v, b in PAIRS]
        for v in VARIANTS:
            cells.append(ratio((layout, element, length, batch, v), (layout, "f32", length, batch, v))
                         if element in ("f16", "bf16") else "-")
        print(f"| {layout} | {element} | {length} | {batch} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    args = sys.argv[1:]
    probe_below = None
    if args[:1] == ["--probe-below"] and len(args) > 1:
        probe_below, args = float(args[1]), args[2:]
    if not args:
        sys.exit(__doc__)
    main(args, probe_below)
