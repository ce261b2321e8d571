#!/usr/bin/env python3
"""Turns Google Benchmark JSON from bench_decode_tile into Markdown: for each group shape and
element type (rows), ns per row and the fraction of one core's multiply-add peak of the score
pass, the value pass and both (with the next tile's asks), with the rows in one tile, 1 MiB or
1 GiB (columns). Usage: decode_tile_table.py run.json. With repetitions, each case's median."""
import re
import sys

from benchmark_runs import case_results

NAME = re.compile(r"BM_DecodeTile<(\w+), (?:Eigen::|std::)?(\w+)>/resident_KiB:(\d+)/pass:(\d)")
PASSES = {"0": "score", "1": "value", "2": "both"}
RESIDENT = {"32": "one tile", "1024": "1 MiB", "1048576": "1 GiB"}


def main(path):
    context, results = case_results(path, NAME)
    rows, columns = {}, []
    for (shape, element, resident, step), run in results:
        column = f"{RESIDENT[resident]}: {PASSES[step]}"
        if column not in columns:
            columns.append(column)
        rows.setdefault(f"{shape} {element}", {})[column] = (run["ns_per_row"], run["of_fma_peak"], run["GB_per_s"])
    print(f"{context.get('cpu_model', 'unknown CPU')}, 1 thread; FMA probe {float(context['one_core_fma_probe_GFMA_per_s']):.1f} GFMA/s, "
          f"read probe {float(context['one_core_read_probe_GB_per_s']):.1f} GB/s; {context['date']}\n")
    print("ns per row (fraction of the FMA peak; GB/s where the rows come from DRAM)\n")
    print("| shape | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, values in rows.items():
        cells = []
        for c in columns:
            ns, peak, gbs = values[c]
            cells.append(f"{ns:.1f} ({peak:.2f}; {gbs:.1f} GB/s)" if c.startswith("1 GiB") else f"{ns:.1f} ({peak:.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
