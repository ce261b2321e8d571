#!/usr/bin/env python3
"""Turns Google Benchmark JSON from bench_decode_variants into Markdown: per (layout, element,
L, batch) each variant's time per step, fraction of its roofline and which roof binds (M: memory,
C: compute), then time ratios against MHA at the same shape next to the byte ratios, and 16-bit
against float. Usage: decode_variants_table.py run.json [before.json] (before: a second column
of fractions of roofline, e.g. the previous kernel's run). With repetitions, each case's median."""
import json
import re
import sys

NAME = re.compile(r"BM_DecodeVariant<polyattn::(\w+(?:<\d+>)?), polyattn::(\w+(?:<\d+>)?), (\w+(?:::\w+)?)>/L:(\d+)/batch:(\d+)")
VARIANTS = ["Mha", "Gqa<2>", "Mqa", "SlimK2", "XCache"]
ELEMENT = {"float": "f32", "Eigen::half": "f16", "Eigen::bfloat16": "bf16", "std::int8_t": "i8"}


def load(path, probe_below=None):
    """The run's context and its cases by (layout, T, L, batch, variant): each case's median of
    repetitions. With probe_below (GB/s), each case's median over only the repetitions whose read
    probe, taken next to it, read below that (a VM's low-bandwidth state); a case with none is left out."""
    data = json.load(open(path))
    runs, medians = {}, set()

    def key_of(m):
        v, layout, element, length, batch = m.groups()
        return (layout, ELEMENT.get(element, element), int(length), int(batch), "SlimK2" if v.startswith("SlimK") else v)

    if probe_below is not None:
        kept = {}
        for run in data["benchmarks"]:
            m = NAME.search(run["name"])
            if m and run.get("run_type") == "iteration" and not run.get("error_occurred") \
                    and run.get("read_probe_GB_per_s", float("inf")) < probe_below:
                kept.setdefault(key_of(m), []).append(run)
        for key, reps in kept.items():
            runs[key] = sorted(reps, key=lambda r: r["real_time"])[(len(reps) - 1) // 2]
        return data.get("context", {}), runs
    for run in data["benchmarks"]:
        m = NAME.search(run["name"])
        if not m or run.get("error_occurred"):
            continue
        # With --benchmark_repetitions the median stands for the case (the VM's bandwidth drifts)
        median = run.get("run_type") == "aggregate" and run.get("aggregate_name") == "median"
        if run.get("run_type") == "aggregate" and not median:
            continue
        key = key_of(m)
        if median or key not in medians:
            runs[key] = run
        if median:
            medians.add(key)
    return data.get("context", {}), runs


def main(path, before_path=None):
    context, runs = load(path)
    before = load(before_path)[1] if before_path else {}
    print(f"CPU: {context.get('cpu_model')}; read probe {float(context.get('read_probe_GB_per_s', 0)):.1f} GB/s; "
          f"FMA probe {float(context.get('fma_probe_GFMA_per_s', 0)):.1f} GFMA/s\n")
    shapes = sorted({k[:4] for k in runs})
    head = "| layout | T | L | batch | " + " | ".join(f"{v} us, of roof{' (before)' if before else ''}" for v in VARIANTS)
    print(head + " | SlimK2/MHA t (bytes) | XCache/MHA t (bytes) | MQA/MHA t (bytes) |")
    print("|" + "---|" * (4 + len(VARIANTS) + 3))
    for shape in shapes:
        cells = []
        for v in VARIANTS:
            r = runs.get(shape + (v,))
            if not r:
                cells.append("-")
                continue
            cell = f"{r['real_time']:.0f}, {r['of_roofline']:.2f}{'M' if r['memory_bound'] else 'C'}"
            b = before.get(shape + (v,))
            if b:
                cell += f" ({b['of_roofline']:.2f})"
            cells.append(cell)
        ratios = []
        mha = runs.get(shape + ("Mha",))
        for v in ("SlimK2", "XCache", "Mqa"):
            r = runs.get(shape + (v,))
            ratios.append(f"{r['real_time'] / mha['real_time']:.2f} ({r['MB_per_step'] / mha['MB_per_step']:.2f})" if r and mha else "-")
        print(f"| {shape[0]} | {shape[1]} | {shape[2]} | {shape[3]} | " + " | ".join(cells + ratios) + " |")
    print("\n16-bit and int8 against float, time ratio (bytes: 0.50 for 16-bit; int8 in parentheses, "
          "its scales included):\n")
    print("| layout | L | batch | " + " | ".join(f"{v} f16/f32, bf16/f32, i8/f32" for v in VARIANTS) + " |")
    print("|" + "---|" * (3 + len(VARIANTS)))
    for layout, length, batch in sorted({(k[0], k[2], k[3]) for k in runs}):
        cells = []
        for v in VARIANTS:
            f = runs.get((layout, "f32", length, batch, v))
            parts = []
            for e in ("f16", "bf16", "i8"):
                r = runs.get((layout, e, length, batch, v))
                if not (f and r):
                    parts.append("-")
                    continue
                part = f"{r['real_time'] / f['real_time']:.2f}"
                if e == "i8":
                    part += f" ({r['MB_per_step'] / f['MB_per_step']:.2f})"
                parts.append(part)
            cells.append(", ".join(parts))
        print(f"| {layout} | {length} | {batch} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
