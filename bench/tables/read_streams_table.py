#!/usr/bin/env python3
"""Turns Google Benchmark JSON from bench_read_streams into Markdown: GB/s read per element type
and thread count (columns) for each way of asking for lines ahead (rows), with the run's CPU and
read probe. Usage: read_streams_table.py run.json. With repetitions, each case's median."""
import re
import sys

from benchmark_runs import case_results

NAME = re.compile(r"BM_ReadStream<(?:Eigen::|std::)?(\w+)>/threads:(\d+)/ask_distance:(\d+)/ask_every:(\d+)")
ORDINAL = {"2": "2nd", "3": "3rd"}


def asks(distance, every):
    if distance == "0":
        return "no asks"
    which = "every line" if every == "1" else "each page's first line" if every == "64" else f"every {ORDINAL.get(every, every + 'th')} line"
    return f"{which}, {int(distance) // 1024} KiB ahead"


def main(path):
    context, results = case_results(path, NAME)
    rows, columns = {}, []
    for (element, threads, distance, every), run in results:
        column = f"{element} {threads}T"
        if column not in columns:
            columns.append(column)
        rows.setdefault(asks(distance, every), {})[column] = run["GB_per_s"]
    print(f"{context.get('cpu_model', 'unknown CPU')}; read probe {float(context['read_probe_GB_per_s']):.1f} GB/s; {context['date']}\n")
    print("| asks | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, values in rows.items():
        print(f"| {name} | " + " | ".join(f"{values[c]:.1f}" if c in values else "-" for c in columns) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
