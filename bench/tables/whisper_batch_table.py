#!/usr/bin/env python3
"""Markdown tables from the whisper CLI's stderr logs written by bench/whisper/whisper_batch.sh: per
beam size, batch and policy pair, encode/decode time, decode tokens/s (all decoder work, and the decode
steps alone, without opening windows and prefill), self and cross cache bytes, and the ratios
against mha/nhd + baseline at the same beam size and batch (cache bytes held, tokens/s); with beams,
what sharing saves (self rows held against every beam copying them, the cross cache against one per
beam) and the peak resident memory. The load average
before each run comes from the log: the machine may be shared."""
import re
import sys

PATTERNS = {
    "load": re.compile(r"^load: ([\d.]+) ([\d.]+) ([\d.]+)"),
    "run": re.compile(r"^run: batch (\d+)(?: beam (\d+))? --self (\S+) --cross (\S+)"),
    "max_batch": re.compile(r"batch up to (\d+) window"),
    "times": re.compile(r"mel ([\d.]+) ms, encode ([\d.]+) ms, decode ([\d.]+) ms \(opening windows ([\d.]+) ms, .*?\): "
                        r"(\d+) tokens, ([\d.]+) tokens/s"),
    "steps": re.compile(r"prefill ([\d.]+) ms .*?; decode steps ([\d.]+) ms: (\d+) steps, (\d+) tokens, ([\d.]+) tokens/s"),
    "self": re.compile(r"self  cache \(.*?\): (\d+) B per token over all layers; peak (\d+) tokens held = (\d+) B .*?"
                       r"allocated (\d+) B .*?as if copied per beam (\d+) B"),
    "cross": re.compile(r"cross cache \(.*?\): (\d+) B per frame over all layers; peak (\d+) frames held = (\d+) B .*?"
                        r"allocated (\d+) B .*?as if copied per beam (\d+) B"),
    "rss": re.compile(r"peak memory \(max resident set\): ([\d.]+) MiB"),
}


def parse(path):
    found = {}
    for line in open(path):
        for key, pattern in PATTERNS.items():
            m = pattern.search(line)
            if m and key not in found:
                found[key] = m.groups()
    missing = [k for k in PATTERNS if k not in found]
    if missing:
        raise SystemExit(f"{path}: no {', '.join(missing)} line (did the run fail? see the log)")
    batch, beam, self_name, cross = found["run"]
    mel, enc, dec, open_ms, tokens, tps = found["times"]
    prefill, steps_ms, steps, step_tokens, tps_steps = found["steps"]
    return {
        "batch": int(batch), "beam": int(beam or 1), "self": self_name, "cross": cross, "load": "/".join(found["load"]),
        "max_batch": int(found["max_batch"][0]),
        "encode_ms": float(enc), "decode_ms": float(dec), "open_ms": float(open_ms), "tokens": int(tokens),
        "prefill_ms": float(prefill), "steps_ms": float(steps_ms), "steps": int(steps), "step_tokens": int(step_tokens),
        "tps": float(tps), "tps_steps": float(tps_steps),
        "self_bpt": int(found["self"][0]), "self_held": int(found["self"][2]), "self_alloc": int(found["self"][3]),
        "self_copied": int(found["self"][4]),
        "cross_bpf": int(found["cross"][0]), "cross_held": int(found["cross"][2]), "cross_alloc": int(found["cross"][3]),
        "cross_copied": int(found["cross"][4]), "rss": float(found["rss"][0]),
    }


def mib(b):
    return f"{b / 2**20:.2f}"


def ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}x" if b else "-"


def main(paths):
    runs = [parse(p) for p in paths]
    order = ["mha/nhd+baseline", "mha/nhd+k-only", "mha/nhd+e-cache", "mha/nhd+hybrid", "slimk/nhd+e-cache", "xcache/nhd+e-cache"]
    pair = lambda r: f"{r['self']}+{r['cross']}"
    runs.sort(key=lambda r: (r["beam"], r["batch"], order.index(pair(r)) if pair(r) in order else len(order), pair(r)))
    base = {(r["beam"], r["batch"]): r for r in runs if pair(r) == "mha/nhd+baseline"}

    # Time. decode = opening windows + prefill (prompt and the baseline/K-only cross K/V
    # projections) + steps; "decode tok/s" is text tokens over all of it, "step tok/s" the tokens
    # fed through the steps (one per live sequence and step) over the steps' time.
    print("| beam | batch | self | cross | load 1/5/15 min | encode ms | decode ms | open ms | prefill ms | steps ms | steps "
          "| text tokens | decode tok/s | step tok/s | decode tok/s / baseline | step tok/s / baseline |")
    print("|" + "---|" * 16)
    for r in runs:
        b = base.get((r["beam"], r["batch"]))
        batch = str(r["batch"]) if r["max_batch"] == r["batch"] else f"{r['batch']} (max {r['max_batch']})"
        print(f"| {r['beam']} | {batch} | {r['self']} | {r['cross']} | {r['load']} | {r['encode_ms']:.0f} | {r['decode_ms']:.0f} | "
              f"{r['open_ms']:.0f} | {r['prefill_ms']:.0f} | {r['steps_ms']:.0f} | {r['steps']} | {r['tokens']} | "
              f"{r['tps']:.1f} | {r['tps_steps']:.1f} | {ratio(r['tps'], b['tps']) if b else '-'} | "
              f"{ratio(r['tps_steps'], b['tps_steps']) if b else '-'} |")

    # Memory at the peak of the run (bytes held by the open sequences; shared rows count once).
    print()
    print("| beam | batch | self | cross | self B/token | self peak MiB | cross B/frame | cross peak MiB "
          "| self bytes / baseline | cross bytes / baseline |")
    print("|" + "---|" * 10)
    for r in runs:
        b = base.get((r["beam"], r["batch"]))
        print(f"| {r['beam']} | {r['batch']} | {r['self']} | {r['cross']} | {r['self_bpt']} | {mib(r['self_held'])} | {r['cross_bpf']} | "
              f"{mib(r['cross_held'])} | {ratio(r['self_held'], b['self_held'], 3) if b else '-'} | "
              f"{ratio(r['cross_held'], b['cross_held'], 3) if b else '-'} |")

    # What sharing saves with beams: self-attention rows (Paged<P> forks share full pages;
    # contiguous layouts copy) and the cross cache (one per window, whatever its beams).
    if any(r["beam"] > 1 for r in runs):
        print()
        print("| beam | batch | self | cross | self held MiB | self if every beam copied MiB | self allocated MiB "
              "| cross held MiB | cross if per beam MiB | peak RSS MiB | step tok/s |")
        print("|" + "---|" * 11)
        for r in runs:
            print(f"| {r['beam']} | {r['batch']} | {r['self']} | {r['cross']} | {mib(r['self_held'])} | {mib(r['self_copied'])} | "
                  f"{mib(r['self_alloc'])} | {mib(r['cross_held'])} | {mib(r['cross_copied'])} | {r['rss']:.0f} | "
                  f"{r['tps_steps']:.1f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: whisper_batch_table.py LOG...")
    main(sys.argv[1:])
