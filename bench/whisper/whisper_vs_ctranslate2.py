#!/usr/bin/env python3
"""polyattn's Whisper example against CTranslate2 on the same tiny.en weights and audio.

CTranslate2 gets a log-mel spectrogram computed here in numpy, independently of the C++ front
end (Whisper's algorithm, Slaney filters as librosa computes them), and decodes with
openai-whisper's suppression rules, greedily or with --beam-size N (CTranslate2's beam search,
which the CLI follows). The polyattn CLI runs once per instantiated policy pair, which it lists
in `whisper --help`. Prints, per decoder, whether its tokens equal CTranslate2's, encode time,
decode tokens/s, total time, peak memory and the end-to-end ratio polyattn / CTranslate2.

Exit codes: 0 exact policies match CTranslate2; 1 an exact policy's tokens differ (policies
whose --self name starts with "mla" approximate attention and are only reported);
3 CTranslate2 cannot be imported or run; 4 the polyattn CLI is missing or fails; 2 usage.
Run through bench/whisper/whisper_vs_ctranslate2.sh, which makes the virtual environment.
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
import wave

import numpy as np

EXIT_MISMATCH, EXIT_USAGE, EXIT_CT2, EXIT_POLYATTN = 1, 2, 3, 4

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root
SHARED = os.path.join(REPO, "..", "shared", "data")

SAMPLE_RATE, N_FFT, HOP, N_SAMPLES = 16000, 400, 160, 480000  # 30 s windows


# ---- audio and log-mel (numpy, independent of examples/whisper/mel.hpp) -----------------

def read_wav_16k_mono(path):
    """PCM 8/16/32-bit WAV at 16 kHz as float64 in [-1, 1], channels averaged."""
    with wave.open(path, "rb") as w:
        rate, channels, width, n = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
        raw = w.readframes(n)
    if rate != SAMPLE_RATE:
        raise ValueError(f"{path}: {rate} Hz; this script reads 16 kHz audio only (resample it first)")
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float64) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float64) / 32768.0
    elif width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float64) / 2147483648.0
    else:
        raise ValueError(f"{path}: {8 * width}-bit PCM is not supported here")
    return x.reshape(-1, channels).mean(axis=1)


def hz_to_mel_slaney(f):
    f = np.asarray(f, np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep, f / f_sp)


def mel_to_hz_slaney(m):
    m = np.asarray(m, np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filters_slaney(n_mels=80, sr=SAMPLE_RATE, n_fft=N_FFT):
    """librosa.filters.mel(sr, n_fft, n_mels) with htk=False, norm="slaney" (what Whisper ships)."""
    fft_freqs = np.linspace(0.0, sr / 2.0, 1 + n_fft // 2)
    mel_f = mel_to_hz_slaney(np.linspace(hz_to_mel_slaney(0.0), hz_to_mel_slaney(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    weights = np.zeros((n_mels, len(fft_freqs)))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


def log_mel(audio, filters):
    """Whisper's log_mel_spectrogram of pad_or_trim(audio): (n_mels, 3000) float32."""
    x = np.zeros(N_SAMPLES)
    x[:min(len(audio), N_SAMPLES)] = audio[:N_SAMPLES]
    # torch.stft(center=True, pad_mode="reflect"), periodic Hann window, last frame dropped.
    x = np.pad(x, N_FFT // 2, mode="reflect")
    n_frames = 1 + (len(x) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(x, (n_frames, N_FFT), (x.strides[0] * HOP, x.strides[0]))
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2  # (n_frames, 201)
    mel = filters @ power[:-1].T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def check_filters(filters):
    path = os.path.join(SHARED, f"mel_{filters.shape[0]}_{filters.shape[0]}x{filters.shape[1]}.f32le")
    if not os.path.exists(path):
        print(f"mel filters: {path} not present, no cross-check")
        return
    ref = np.fromfile(path, "<f4").reshape(filters.shape)
    print(f"mel filters: numpy Slaney vs {os.path.relpath(path)}: max abs diff {np.abs(filters - ref).max():.3g}")


# ---- CTranslate2 --------------------------------------------------------------------------

def run_ctranslate2(args, audios, filters):
    try:
        import ctranslate2
    except Exception as e:  # noqa: BLE001 - any import failure means the peer is unavailable
        print(f"error: cannot import ctranslate2 ({e}); run bench/whisper/whisper_vs_ctranslate2.sh", file=sys.stderr)
        sys.exit(EXIT_CT2)
    try:
        model = ctranslate2.models.Whisper(args.model, device="cpu", compute_type="float32",
                                           intra_threads=args.threads, inter_threads=1)
        prompt = [50257, 50362]  # <|startoftranscript|><|notimestamps|> (tiny.en ids)
        per_file = []
        for path, audio in zip(args.audio, audios):
            runs = []
            for rep in range(args.reps + 1):  # the first is a warm-up
                t0 = time.perf_counter()
                mel = log_mel(audio, filters)
                t1 = time.perf_counter()
                enc = model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None])), to_cpu=False)
                t2 = time.perf_counter()
                # suppress_tokens=[-1]: the model's config suppress_ids, as openai-whisper's "-1".
                res = model.generate(enc, [prompt], beam_size=args.beam_size, max_length=448, suppress_blank=True,
                                     suppress_tokens=[-1], return_scores=False)
                t3 = time.perf_counter()
                tokens = [t for t in res[0].sequences_ids[0] if t < 50256]  # text tokens (no eot)
                if rep:
                    runs.append({"mel": 1e3 * (t1 - t0), "encode": 1e3 * (t2 - t1), "decode": 1e3 * (t3 - t2),
                                 "total": 1e3 * (t3 - t0), "tokens": tokens})
            per_file.append(runs)
    except Exception as e:  # noqa: BLE001 - report any runtime failure of the peer as such
        print(f"error: ctranslate2 failed to run: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(EXIT_CT2)
    # One row over all files: per repetition the sums, then the median.
    reps = list(zip(*per_file))
    sums = [{k: sum(r[k] for r in rep) for k in ("mel", "encode", "decode", "total")} for rep in reps]
    n_tokens = sum(len(runs[0]["tokens"]) for runs in per_file)
    med = {k: statistics.median(s[k] for s in sums) for k in ("mel", "encode", "decode", "total")}
    return {
        "name": f"ctranslate2 {ctranslate2.__version__}",
        "tokens": [runs[0]["tokens"] for runs in per_file],
        "stable": all(r["tokens"] == runs[0]["tokens"] for runs in per_file for r in runs),
        "encode_ms": med["encode"], "mel_ms": med["mel"], "total_ms": med["total"],
        "tok_s": 1e3 * n_tokens / med["decode"] if med["decode"] > 0 else 0.0,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


# ---- polyattn CLI -------------------------------------------------------------------------

def cli_policies(cli):
    """(self, cross) pairs from the "--self X --cross Y, ..." list in `whisper --help`."""
    help_text = subprocess.run([cli, "--help"], capture_output=True, text=True).stderr
    pairs = re.findall(r"--self\s+([^\s,]+)\s+--cross\s+([^\s,]+)", help_text)
    if not pairs:
        print(f"error: no policy pairs in `{cli} --help`:\n{help_text}", file=sys.stderr)
        sys.exit(EXIT_POLYATTN)
    return list(dict.fromkeys(pairs))


def run_polyattn_once(args, self_name, cross_name):
    cmd = [args.cli, "--model", args.model, "--audio", *args.audio, "--self", self_name, "--cross", cross_name,
           "--threads", str(args.threads), "--beam-size", str(args.beam_size), "--tokens",
           "--timestamps", "off", "--temperature-fallback", "off"]  # CTranslate2's generate() on each window
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"error: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}", file=sys.stderr)
        sys.exit(EXIT_POLYATTN)
    tokens, texts = [], []
    for path in args.audio:
        tok_line = next((l for l in p.stdout.splitlines() if l.startswith(path + ":tokens:")), None)
        text_line = next((l for l in p.stdout.splitlines()
                          if l.startswith(path + ":") and not l.startswith(path + ":tokens:")), None)
        if tok_line is None or text_line is None:
            print(f"error: no transcript/tokens for {path} in:\n{p.stdout}", file=sys.stderr)
            sys.exit(EXIT_POLYATTN)
        tokens.append([int(t) for t in tok_line[len(path) + len(":tokens:"):].split()])
        texts.append(text_line[len(path) + 1:])
    m = re.search(r"mel ([\d.]+) ms, encode ([\d.]+) ms, decode ([\d.]+) ms .*?: (\d+) tokens, ([\d.]+) tokens/s", p.stderr)
    mem = re.search(r"peak memory \(max resident set\): ([\d.]+) MiB", p.stderr)
    if not m or not mem:
        print(f"error: cannot parse the timing summary of {' '.join(cmd)}:\n{p.stderr}", file=sys.stderr)
        sys.exit(EXIT_POLYATTN)
    mel, enc, dec = float(m.group(1)), float(m.group(2)), float(m.group(3))
    return {"tokens": tokens, "texts": texts, "mel": mel, "encode": enc, "decode": dec, "total": mel + enc + dec,
            "n_tokens": int(m.group(4)), "peak": float(mem.group(1))}


def run_polyattn(args, self_name, cross_name):
    runs = [run_polyattn_once(args, self_name, cross_name) for _ in range(args.reps + 1)][1:]
    med = {k: statistics.median(r[k] for r in runs) for k in ("mel", "encode", "decode", "total", "peak")}
    return {
        "name": f"polyattn --self {self_name} --cross {cross_name}", "self": self_name,
        "tokens": runs[0]["tokens"], "texts": runs[0]["texts"],
        "stable": all(r["tokens"] == runs[0]["tokens"] for r in runs),
        "encode_ms": med["encode"], "mel_ms": med["mel"], "total_ms": med["total"],
        "tok_s": 1e3 * runs[0]["n_tokens"] / med["decode"] if med["decode"] > 0 else 0.0,
        "peak_mib": med["peak"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("audio", nargs="*", help="16 kHz WAV files (default ../shared/data/jfk.wav)")
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny.en"))
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "release", "examples", "whisper", "whisper"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=1, help="for both decoders (1: greedy)")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions after one warm-up (median reported)")
    args = ap.parse_args()
    args.audio = args.audio or [os.path.join(SHARED, "jfk.wav")]
    for path in args.audio + [os.path.join(args.model, "model.bin")]:
        if not os.path.exists(path):
            print(f"error: {path} does not exist", file=sys.stderr)
            return EXIT_USAGE
    if not os.access(args.cli, os.X_OK):
        print(f"error: {args.cli} is not built (cmake --preset release && cmake --build build/release --target whisper)",
              file=sys.stderr)
        return EXIT_POLYATTN

    filters = mel_filters_slaney()
    check_filters(filters)
    try:
        audios = [read_wav_16k_mono(p) for p in args.audio]
    except (ValueError, wave.Error) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE

    # The CLI runs first, while this process is small: Linux carries a parent's RSS at fork
    # into the child's ru_maxrss, which is what the CLI reports as its peak.
    rows = [run_polyattn(args, s, c) for s, c in cli_policies(args.cli)]
    peer = run_ctranslate2(args, audios, filters)

    print(f"\n{len(args.audio)} file(s), {args.threads} thread(s), median of {args.reps} runs after a warm-up; "
          f"mel+encode+decode, model load excluded; CTranslate2's mel is this script's numpy")
    for path, toks in zip(args.audio, peer["tokens"]):
        print(f"ctranslate2 tokens {os.path.basename(path)}: {' '.join(map(str, toks))}")
    head = f"{'decoder':<48} {'tokens = ct2':>12} {'encode ms':>10} {'decode tok/s':>13} {'total ms':>9} {'peak MiB':>9} {'total / ct2':>11}"
    print(head)
    print("-" * len(head))
    print(f"{peer['name']:<48} {'(peer)':>12} {peer['encode_ms']:>10.1f} {peer['tok_s']:>13.1f} {peer['total_ms']:>9.1f} "
          f"{peer['peak_mib']:>9.1f} {1.0:>11.2f}")
    failed = False
    for r in rows:
        same = r["tokens"] == peer["tokens"]
        exact = not r["self"].startswith("mla")
        mark = "yes" if same else ("no" if exact else "no (approx)")
        failed |= exact and not same
        print(f"{r['name']:<48} {mark:>12} {r['encode_ms']:>10.1f} {r['tok_s']:>13.1f} {r['total_ms']:>9.1f} "
              f"{r['peak_mib']:>9.1f} {r['total_ms'] / peer['total_ms']:>11.2f}")
        if not r["stable"]:
            print(f"  warning: {r['name']} gave different tokens across repetitions")
        if not same:
            for path, mine, theirs in zip(args.audio, r["tokens"], peer["tokens"]):
                if mine != theirs:
                    print(f"  {os.path.basename(path)}: {' '.join(map(str, mine))}")
    if not peer["stable"]:
        print("  warning: ctranslate2 gave different tokens across repetitions")
    print("transcript (first policy): " + " | ".join(rows[0]["texts"]))
    peak_note = "peak MiB: process max RSS (ctranslate2: this Python process, numpy and the interpreter included)"
    print(peak_note)
    if failed:
        print("FAIL: an exact policy's tokens differ from ctranslate2's", file=sys.stderr)
        return EXIT_MISMATCH
    return 0


if __name__ == "__main__":
    sys.exit(main())
