#!/usr/bin/env python3
"""polyattn's Whisper CLI against its peers end to end, as a new user runs them.

Every run is a fresh process, model load included, greedy decoding without timestamps, on the
same tiny.en weights and audio; the figure of each system and clip is the median of --runs runs
taken in one invocation, alternating the systems run by run. Per system and clip: wall time,
encode ms, decode tokens/s, peak RSS (the child's, from wait4), the output's agreement with
polyattn's first pair, and polyattn's wall-time ratio to the peer.

Systems:
- the polyattn CLI (`--pairs`, default mha/nhd+baseline and xcache/nhd+e-cache);
- CTranslate2 (`ctranslate2` from PyPI) at float32 and int8, in a child Python process that loads
  the model, computes the log-mel in numpy (bench/whisper/whisper_vs_ctranslate2.py) and decodes;
- whisper.cpp's whisper-cli, when --whisper-cpp names one you built (v1.8 or later), on the ggml
  file bench/whisper/ggml_peer_model.sh writes from the same weights: greedy (-bs 1), no temperature
  fallback (-nf), no timestamps (-nt), its default flash attention. Its text is compared, not
  its tokens (the CLI prints no ids without token timestamps, which cost time).

Decode tokens/s: tokens over the decoding time each system reports. polyattn: text tokens over
its "decode" (cross K/V projections included); CTranslate2: tokens over generate(); whisper.cpp:
decoder runs over its decode + batch-decode + prompt times (its cross K/V projections are in its
encode time).

Clips: ../shared/data/jfk.wav (11 s); jfk.wav six times with 1 s of silence between (71 s,
written under build/); a batch of 16 jfk.wav (polyattn: one process decoding them as one batch, and with --batch 1
one window after another; CTranslate2 and whisper.cpp: one process decoding them one after
another).

Run through bench/whisper/whisper_peers.sh, which makes the virtual environment. Exit 3 when CTranslate2
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
import tempfile
import time
import wave

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root
SHARED = os.path.join(REPO, "..", "shared", "data")
EXIT_USAGE, EXIT_CT2, EXIT_POLYATTN, EXIT_WHISPER_CPP = 2, 3, 4, 5
PROMPT = [50257, 50362]  # <|startoftranscript|><|notimestamps|> (tiny.en ids)


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def run_timed(cmd):
    """Runs cmd as a fresh process: (wall s, exit code, stdout, stderr, peak RSS MiB). The peak is
    the child's ru_maxrss from wait4, the same measure for every system."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0), err.seek(0)
        return wall, p.returncode, out.read(), err.read(), usage.ru_maxrss / 1024.0


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
    import ctranslate2

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from whisper_vs_ctranslate2 import check_filters, log_mel, mel_filters_slaney, read_wav_16k_mono

    t0 = time.perf_counter()
    model = ctranslate2.models.Whisper(args.model, device="cpu", compute_type=args.compute_type,
                                       intra_threads=args.threads, inter_threads=1)
    t_load = time.perf_counter()
    filters = mel_filters_slaney()
    check_filters(filters)
    tokens, encode_s, generate_s, n_generated = [], 0.0, 0.0, 0
    for path in args.audio:
        audio = read_wav_16k_mono(path)
        n_windows = max(1, -(-len(audio) // 480000))  # 30 s windows, like the CLI
        file_tokens = []
        for w in range(n_windows):
            mel = log_mel(audio[w * 480000:(w + 1) * 480000], filters)
            t1 = time.perf_counter()
            enc = model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None])), to_cpu=False)
            encode_s += time.perf_counter() - t1
            t2 = time.perf_counter()
            res = model.generate(enc, [PROMPT], beam_size=args.beam_size, max_length=448, suppress_blank=True, suppress_tokens=[-1])
            generate_s += time.perf_counter() - t2
            n_generated += len(res[0].sequences_ids[0])
            file_tokens += [t for t in res[0].sequences_ids[0] if t < 50256]
        tokens.append(file_tokens)
    print(json.dumps({"tokens": tokens, "load_ms": 1e3 * (t_load - t0), "encode_ms": 1e3 * encode_s,
                      "decode_tokens_per_s": n_generated / generate_s if generate_s > 0 else 0.0,
                      "version": ctranslate2.__version__}))


# ---- the runs -----------------------------------------------------------------------------

def polyattn_run(args, pair, clip, batch=16):
    self_name, cross_name = pair.split("+")
    cmd = [args.cli, "--model", args.model, "--threads", str(args.threads), "--batch", str(batch), "--tokens",
           "--beam-size", str(args.beam_size), "--timestamps", "off", "--temperature-fallback", "off",
           "--self", self_name, "--cross", cross_name, "--audio", *clip]
    wall, rc, out, err, peak = run_timed(cmd)
    if rc != 0:
        print(f"error: {' '.join(cmd)} exited {rc}:\n{err}", file=sys.stderr)
        sys.exit(EXIT_POLYATTN)
    tokens = [[int(t) for t in l.split(":tokens:", 1)[1].split()] for l in out.splitlines() if ":tokens:" in l]
    text = " ".join(l.split(":", 1)[1] for l in out.splitlines() if l.startswith(clip[0] + ":") and ":tokens:" not in l)
    enc = re.search(r"encode ([\d.]+) ms", err)
    dec = re.search(r"decode [\d.]+ ms \(.*?\): \d+ tokens, ([\d.]+) tokens/s", err)
    return {"wall": wall, "tokens": tokens, "text": normalise(text), "encode_ms": float(enc.group(1)),
            "decode_tokens_per_s": float(dec.group(1)), "peak_mib": peak}


def ct2_run(args, compute_type, clip):
    cmd = [sys.executable, os.path.abspath(__file__), "--ct2-child", "--compute-type", compute_type, "--model", args.model,
           "--threads", str(args.threads), "--beam-size", str(args.beam_size), *clip]
    wall, rc, out, err, peak = run_timed(cmd)
    if rc != 0:
        print(f"error: the CTranslate2 child exited {rc}:\n{err}", file=sys.stderr)
        sys.exit(EXIT_CT2)
    r = json.loads(out.strip().splitlines()[-1])
    r["wall"], r["peak_mib"] = wall, peak
    return r


def whisper_cpp_run(args, clip):
    cmd = [args.whisper_cpp, "-m", args.ggml, "-t", str(args.threads), "-bs", str(args.beam_size), "-nf", "-nt"]
    for path in clip:
        cmd += ["-f", path]
    wall, rc, out, err, peak = run_timed(cmd)
    if rc != 0:
        print(f"error: {' '.join(cmd)} exited {rc}:\n{err[-2000:]}", file=sys.stderr)
        sys.exit(EXIT_WHISPER_CPP)

    def timing(name):  # whisper_print_timings: "<name> time = X ms / N runs"; the last print (one per process)
        found = re.findall(rf"{name} time =\s*([\d.]+) ms(?: /\s*(\d+) runs)?", err)
        return (float(found[-1][0]), int(found[-1][1] or 0)) if found else (0.0, 0)

    (enc_ms, _), (dec_ms, n_dec), (batchd_ms, n_batchd), (prompt_ms, _) = (timing(n) for n in ("encode", "decode", "batchd", "prompt"))
    decode_ms = dec_ms + batchd_ms + prompt_ms
    return {"wall": wall, "tokens": None, "text": normalise(out), "encode_ms": enc_ms, "peak_mib": peak,
            "decode_tokens_per_s": 1e3 * (n_dec + n_batchd) / decode_ms if decode_ms > 0 else 0.0}


def normalise(text):
    """Text as compared across systems: whitespace collapsed."""
    return " ".join(text.split())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("audio", nargs="*", help=argparse.SUPPRESS)  # the CT2 child's files
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny.en"))
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "release", "examples", "whisper", "whisper"))
    ap.add_argument("--pairs", nargs="+", default=["mha/nhd+baseline", "xcache/nhd+e-cache"])
    ap.add_argument("--serial-pairs", nargs="*", default=["mha/nhd+baseline", "xcache/nhd+e-cache"],
                    help="pairs also run with --batch 1 (none: skip)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=1, help="both systems (1: greedy)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--whisper-cpp", default="",
                    help="a whisper.cpp whisper-cli you built (v1.8 or later); skipped with a note when absent")
    ap.add_argument("--ggml", default=os.path.join(REPO, "build", "peers", "ggml-tiny.en-ct2.bin"),
                    help="the ggml file of the same weights (bench/whisper/ct2_to_ggml.py)")
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
    # The same pairs one window at a time (whisper.cpp's order for a list of files): the 16-clip
    # batch then holds one window's caches, not 16.
    systems += [(f"polyattn {p} --batch 1", lambda c, p=p: polyattn_run(args, p, c, batch=1)) for p in args.serial_pairs]
    systems += [(f"ctranslate2 {t}", lambda c, t=t: ct2_run(args, t, c)) for t in ("float32", "int8")]
    if os.access(args.whisper_cpp, os.X_OK) and os.path.exists(args.ggml):
        systems.append(("whisper.cpp f16", lambda c: whisper_cpp_run(args, c)))
    else:
        print(f"note: whisper.cpp not run ({args.whisper_cpp} or {args.ggml} missing: pass --whisper-cpp PATH and run bash bench/whisper/ggml_peer_model.sh)",
              file=sys.stderr)

    results = {}
    for clip_name, clip in clips.items():
        for run in range(args.runs):  # systems alternate run by run, so drift hits them alike
            for name, fn in systems:
                results.setdefault(clip_name, {}).setdefault(name, []).append(fn(clip))
        print(f"done: {clip_name}", file=sys.stderr)

    print(f"\n{cpu_model()}, {os.cpu_count()} CPUs, {args.threads} threads; fresh process per run, model load included; "
          f"median of {args.runs}; " + ("greedy" if args.beam_size == 1 else f"beam size {args.beam_size}") + ", no timestamps")
    head = "| clip | system | wall s | encode ms | decode tokens/s | peak MiB | output = polyattn's | polyattn wall / this |"
    print(head + "\n|---|---|---|---|---|---|---|---|")
    summary = {"cpu": cpu_model(), "threads": args.threads, "runs": args.runs, "clips": {}}
    for clip_name, by_system in results.items():
        base_name = systems[0][0]
        base_tokens = by_system[base_name][0]["tokens"]
        base_text = by_system[base_name][0]["text"]
        base_wall = statistics.median(r["wall"] for r in by_system[base_name])
        summary["clips"][clip_name] = {}
        for name, runs in by_system.items():
            wall = statistics.median(r["wall"] for r in runs)
            enc = statistics.median(r["encode_ms"] for r in runs)
            peak = statistics.median(r["peak_mib"] for r in runs)
            dec = statistics.median(r["decode_tokens_per_s"] for r in runs)
            by_tokens = runs[0]["tokens"] is not None  # whisper.cpp: text only
            same = all((r["tokens"] == base_tokens) if by_tokens else (r["text"] == base_text) for r in runs)
            agree = ("tokens " if by_tokens else "text ") + ("yes" if same else "no")
            print(f"| {clip_name} | {name} | {wall:.2f} | {enc:.0f} | {dec:.0f} | {peak:.0f} | {agree} | {base_wall / wall:.2f} |")
            summary["clips"][clip_name][name] = {"wall_s": wall, "encode_ms": enc, "decode_tokens_per_s": dec, "peak_mib": peak,
                                                 "output_equal": same, "compared": "tokens" if by_tokens else "text",
                                                 "walls": [r["wall"] for r in runs]}
            if not same and not by_tokens:
                summary["clips"][clip_name][name]["text"] = runs[0]["text"]
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\nJSON: {args.json}. 'polyattn wall / this' below 1 means polyattn ({systems[0][0]}) is faster.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
