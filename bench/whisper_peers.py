#!/usr/bin/env python3
"""polyattn's Whisper CLI against its peers end to end, as a new user runs them.

Every run is a fresh process, model load included, greedy decoding without timestamps, on the
same tiny.en weights and audio; the figure of each system and clip is the median of --runs runs
taken in one invocation, alternating the systems run by run. Per system and clip: wall time,
peak RSS (the child's own, from wait4), the tokens' agreement with polyattn's first pair, and
polyattn's wall-time ratio to the peer.

Systems: the polyattn CLI (`--pairs`, default mha/nhd+baseline and xcache/nhd+e-cache) and
CTranslate2 (`ctranslate2` from PyPI) at float32 and int8, in a child Python process that loads
the model, computes the log-mel in numpy (bench/whisper_vs_ctranslate2.py) and decodes.
whisper.cpp is not run here: it needs a build from its public source, which this repository
does not script.

Clips: ../shared/data/jfk.wav (11 s); jfk.wav six times with 1 s of silence between (71 s,
written under build/); a batch of 16 jfk.wav (polyattn: one process decoding them as one batch;
CTranslate2: one process decoding them one after another).

Run through bench/whisper_peers.sh, which makes the virtual environment. Exit 3 when CTranslate2
cannot run, 4 when the polyattn CLI fails, 2 on bad arguments.
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import wave

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(REPO, "..", "shared", "data")
EXIT_USAGE, EXIT_CT2, EXIT_POLYATTN = 2, 3, 4
PROMPT = [50257, 50362]  # <|startoftranscript|><|notimestamps|> (tiny.en ids)


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def run_timed(cmd):
    """Runs cmd as a fresh process: (wall s, exit code, stdout, stderr). Each child reports its own
    peak RSS (ru_maxrss): the CLI prints it, the CT2 child too."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    return time.perf_counter() - t0, p.returncode, out, err


def write_long_clip(path, copies=6, gap_s=1.0):
    """jfk.wav `copies` times with `gap_s` of silence between, as 16 kHz mono 16-bit WAV."""
    with wave.open(os.path.join(SHARED, "jfk.wav"), "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        pcm = w.readframes(w.getnframes())
    gap = b"\0\0" * int(16000 * gap_s)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with wave.open(path, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(gap.join([pcm] * copies))
    return path


# ---- the CTranslate2 child -----------------------------------------------------------------

def ct2_child(args):
    """Loads the model, transcribes args.audio greedily, prints one JSON line."""
    import resource

    import ctranslate2

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from whisper_vs_ctranslate2 import check_filters, log_mel, mel_filters_slaney, read_wav_16k_mono

    t0 = time.perf_counter()
    model = ctranslate2.models.Whisper(args.model, device="cpu", compute_type=args.compute_type,
                                       intra_threads=args.threads, inter_threads=1)
    t_load = time.perf_counter()
    filters = mel_filters_slaney()
    check_filters(filters)
    tokens, encode_s = [], 0.0
    for path in args.audio:
        audio = read_wav_16k_mono(path)
        n_windows = max(1, -(-len(audio) // 480000))  # 30 s windows, like the CLI
        file_tokens = []
        for w in range(n_windows):
            mel = log_mel(audio[w * 480000:(w + 1) * 480000], filters)
            t1 = time.perf_counter()
            enc = model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None])), to_cpu=False)
            encode_s += time.perf_counter() - t1
            res = model.generate(enc, [PROMPT], beam_size=args.beam_size, max_length=448, suppress_blank=True, suppress_tokens=[-1])
            file_tokens += [t for t in res[0].sequences_ids[0] if t < 50256]
        tokens.append(file_tokens)
    print(json.dumps({"tokens": tokens, "load_ms": 1e3 * (t_load - t0), "encode_ms": 1e3 * encode_s,
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                      "version": ctranslate2.__version__}))


# ---- the runs -----------------------------------------------------------------------------

def polyattn_run(args, pair, clip):
    self_name, cross_name = pair.split("+")
    cmd = [args.cli, "--model", args.model, "--threads", str(args.threads), "--batch", "16", "--tokens",
           "--beam-size", str(args.beam_size), "--timestamps", "off", "--temperature-fallback", "off",
           "--self", self_name, "--cross", cross_name, "--audio", *clip]
    wall, rc, out, err = run_timed(cmd)
    if rc != 0:
        print(f"error: {' '.join(cmd)} exited {rc}:\n{err}", file=sys.stderr)
        sys.exit(EXIT_POLYATTN)
    tokens = [[int(t) for t in l.split(":tokens:", 1)[1].split()] for l in out.splitlines() if ":tokens:" in l]
    enc = re.search(r"encode ([\d.]+) ms", err)
    peak = re.search(r"peak memory \(max resident set\): ([\d.]+) MiB", err)
    return {"wall": wall, "tokens": tokens, "encode_ms": float(enc.group(1)), "peak_mib": float(peak.group(1))}


def ct2_run(args, compute_type, clip):
    cmd = [sys.executable, os.path.abspath(__file__), "--ct2-child", "--compute-type", compute_type, "--model", args.model,
           "--threads", str(args.threads), "--beam-size", str(args.beam_size), *clip]
    wall, rc, out, err = run_timed(cmd)
    if rc != 0:
        print(f"error: the CTranslate2 child exited {rc}:\n{err}", file=sys.stderr)
        sys.exit(EXIT_CT2)
    r = json.loads(out.strip().splitlines()[-1])
    r["wall"] = wall
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("audio", nargs="*", help=argparse.SUPPRESS)  # the CT2 child's files
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny.en"))
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "release", "examples", "whisper", "whisper"))
    ap.add_argument("--pairs", nargs="+", default=["mha/nhd+baseline", "xcache/nhd+e-cache"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=1, help="both systems (1: greedy)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", default=os.path.join(REPO, "build", "whisper_peers.json"))
    ap.add_argument("--ct2-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compute-type", default="float32", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ct2_child:
        return ct2_child(args)
    if not os.access(args.cli, os.X_OK):
        print(f"error: {args.cli} is not built (cmake --preset release && cmake --build build/release --target whisper)",
              file=sys.stderr)
        return EXIT_POLYATTN
    jfk = os.path.join(SHARED, "jfk.wav")
    if not os.path.exists(jfk) or not os.path.exists(os.path.join(args.model, "model.bin")):
        print(f"error: {jfk} and {args.model}/model.bin are needed", file=sys.stderr)
        return EXIT_USAGE
    clips = {"jfk.wav (11 s)": [jfk],
             "jfk x 6 (71 s)": [write_long_clip(os.path.join(REPO, "build", "peers", "jfk_x6.wav"))],
             "16 x jfk.wav": [jfk] * 16}
    systems = [("polyattn " + p, lambda c, p=p: polyattn_run(args, p, c)) for p in args.pairs]
    systems += [(f"ctranslate2 {t}", lambda c, t=t: ct2_run(args, t, c)) for t in ("float32", "int8")]

    results = {}
    for clip_name, clip in clips.items():
        for run in range(args.runs):  # systems alternate run by run, so drift hits them alike
            for name, fn in systems:
                results.setdefault(clip_name, {}).setdefault(name, []).append(fn(clip))
        print(f"done: {clip_name}", file=sys.stderr)

    print(f"\n{cpu_model()}, {os.cpu_count()} CPUs, {args.threads} threads; fresh process per run, model load included; "
          f"median of {args.runs}; " + ("greedy" if args.beam_size == 1 else f"beam size {args.beam_size}") + ", no timestamps")
    head = "| clip | system | wall s | encode ms | peak MiB | tokens = polyattn's | polyattn wall / this |"
    print(head + "\n|---|---|---|---|---|---|---|")
    summary = {"cpu": cpu_model(), "threads": args.threads, "runs": args.runs, "clips": {}}
    for clip_name, by_system in results.items():
        base_name = systems[0][0]
        base_tokens = by_system[base_name][0]["tokens"]
        base_wall = statistics.median(r["wall"] for r in by_system[base_name])
        summary["clips"][clip_name] = {}
        for name, runs in by_system.items():
            wall = statistics.median(r["wall"] for r in runs)
            enc = statistics.median(r["encode_ms"] for r in runs)
            peak = statistics.median(r["peak_mib"] for r in runs)
            same = all(r["tokens"] == base_tokens for r in runs)
            print(f"| {clip_name} | {name} | {wall:.2f} | {enc:.0f} | {peak:.0f} | {'yes' if same else 'no'} | "
                  f"{base_wall / wall:.2f} |")
            summary["clips"][clip_name][name] = {"wall_s": wall, "encode_ms": enc, "peak_mib": peak, "tokens_equal": same,
                                                 "walls": [r["wall"] for r in runs]}
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\nJSON: {args.json}. 'polyattn wall / this' below 1 means polyattn ({systems[0][0]}) is faster.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
