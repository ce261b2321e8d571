#!/usr/bin/env python3
"""Long-form transcription: polyattn's Whisper CLI against faster-whisper on a clip of several
minutes whose spoken text is known.

The clip (build/longform/long.wav, 16 kHz mono) is espeak-ng speech of the sentences below,
resampled with libsoxr (python-soxr, HQ), with jfk.wav after every tenth sentence and 0.6 s of
silence between items, so that sentences straddle the 30 s windows. Both systems read that same
file, with tiny.en (the local CTranslate2 directory, which faster-whisper loads without a hub),
beam size 5, timestamps, conditioning on the previous text and the default temperature fallback;
faster-whisper without VAD. Reported: each transcript's word error rate against the spoken text,
the WER between the two, and the mean |difference| of segment start times, pairing each
faster-whisper segment with the polyattn segment that overlaps it most. Exit 0 when both ran.
Run through bench/whisper/whisper_longform.sh, which makes the virtual environment.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import wave

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root
SHARED = os.path.join(REPO, "..", "shared", "data")

SENTENCES = [
    "Memory bandwidth limits every decoding step.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "The weather today is sunny with a light breeze from the west.",
    "Every new token reads the whole cache of keys and values.",
    "The library keeps one latent vector for each token instead of full keys and values.",
    "She sells sea shells by the sea shore on a quiet summer morning.",
    "A good engineer measures before changing anything in a fast program.",
    "The train leaves the station at noon and arrives in the city before dark.",
    "We walked along the river until the sun went down behind the hills.",
    "Reading the same bytes twice is the most common waste in a decoder.",
    "The committee will meet next week to discuss the new budget.",
    "Children were playing in the park while their parents talked on the benches.",
    "Our results show that sharing the cache between beams saves most of the memory.",
    "He opened the window and the cold air filled the small kitchen.",
    "Attention layers compare every query with every key that came before it.",
    "The old bridge was closed for repairs during the whole winter.",
    "Please remember to turn off the lights when you leave the office.",
    "The orchestra played a long piece that nobody in the audience knew.",
    "A careful test should be able to fail when the code is wrong.",
    "Farmers in the valley grow apples, pears and a little wheat.",
    "The museum opens its new exhibition about ancient ships on Friday.",
    "Quiet libraries are good places to think about difficult problems.",
    "The storm knocked down several trees along the northern road.",
    "Software that nobody can read will not be maintained for long.",
    "My sister bought a red bicycle and rides it to work every day.",
    "The doctor told him to drink more water and sleep longer.",
    "Long audio is cut into windows of thirty seconds for the encoder.",
    "The little dog barked at every car that passed the house.",
    "Good subtitles appear on the screen exactly when the words are spoken.",
    "The conference ended with a short speech from the organisers.",
    "Fresh bread from the corner bakery sells out before eight in the morning.",
    "The captain asked every passenger to stay seated until the ship had docked.",
    "Small changes in the input should not change the answer very much.",
    "Snow covered the mountains long before the first leaves had fallen.",
    "The students wrote their names at the top of each page.",
    "A map of the city hung on the wall beside the front door.",
    "Nobody noticed that the clock in the hall had stopped at midnight.",
    "Thank you for listening to this long recording until the very end.",
]
GAP_S = 0.6


def wer(reference, hypothesis):
    """Word error rate over normalised words (lower case, punctuation dropped, apostrophes kept),
    as examples/whisper/wer.hpp."""
    norm = lambda t: re.sub(r"[^a-z0-9']", " ", t.lower()).split()
    r, h = norm(reference), norm(hypothesis)
    prev = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        cur = [i] + [0] * len(h)
        for j in range(1, len(h) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r[i - 1] != h[j - 1]))
        prev = cur
    return prev[len(h)] / max(1, len(r)), prev[len(h)], len(r)


def read_wav(path):
    with wave.open(path, "rb") as w:
        assert w.getsampwidth() == 2, path
        x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0
        return x.reshape(-1, w.getnchannels()).mean(axis=1), w.getframerate()


def make_clip(out_dir):
    import soxr
    os.makedirs(out_dir, exist_ok=True)
    jfk_text = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
    jfk, rate = read_wav(os.path.join(SHARED, "jfk.wav"))
    assert rate == 16000
    pieces, texts = [], []
    gap = np.zeros(int(GAP_S * 16000), np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        for i, s in enumerate(SENTENCES):
            path = os.path.join(tmp, f"s{i}.wav")
            subprocess.run(["espeak-ng", "-w", path, s], check=True)
            x, r = read_wav(path)
            pieces += [soxr.resample(x, r, 16000, quality="HQ").astype(np.float32), gap]
            texts.append(s)
            if i % 10 == 9:
                pieces += [jfk, gap]
                texts.append(jfk_text)
    audio = np.concatenate(pieces)
    wav = os.path.join(out_dir, "long.wav")
    with wave.open(wav, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(np.clip(np.round(audio * 32768.0), -32768, 32767).astype("<i2").tobytes())
    with open(os.path.join(out_dir, "long.txt"), "w") as f:
        f.write(" ".join(texts) + "\n")
    return wav, " ".join(texts), len(audio) / 16000.0


def run_polyattn(args, wav, out_dir):
    cmd = [args.cli, "--model", args.model, "--audio", wav, "--threads", str(args.threads), "--beam-size", str(args.beam_size),
           "--output-format", "json,srt", "--output-dir", out_dir]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    with open(os.path.join(out_dir, "long.json")) as f:
        doc = json.load(f)
    return [(s["start"], s["end"], s["text"]) for s in doc["segments"]], wall, p.stderr


def run_faster_whisper(args, wav):
    from faster_whisper import WhisperModel
    import faster_whisper
    model = WhisperModel(args.model, device="cpu", compute_type="float32", cpu_threads=args.threads)
    t0 = time.perf_counter()
    segments, _ = model.transcribe(wav, beam_size=args.beam_size, language="en", vad_filter=False)
    segs = [(s.start, s.end, s.text) for s in segments]
    return segs, time.perf_counter() - t0, faster_whisper.__version__


def mean_start_difference(theirs, ours):
    """Each of `theirs` paired with the segment of `ours` that overlaps it most (by time)."""
    diffs = []
    for s, e, _ in theirs:
        best, best_overlap = None, -1.0
        for s2, e2, _ in ours:
            overlap = min(e, e2) - max(s, s2)
            if overlap > best_overlap:
                best, best_overlap = s2, overlap
        if best is not None:
            diffs.append(abs(s - best))
    return sum(diffs) / len(diffs) if diffs else float("nan"), len(diffs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny.en"))
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "release", "examples", "whisper", "whisper"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(REPO, "build", "longform"))
    args = ap.parse_args()
    wav, reference, seconds = make_clip(args.out)
    ours, our_wall, our_log = run_polyattn(args, wav, args.out)
    theirs, their_wall, version = run_faster_whisper(args, wav)
    our_text = "".join(t for _, _, t in ours)
    their_text = "".join(t for _, _, t in theirs)
    with open(os.path.join(args.out, "faster_whisper.txt"), "w") as f:
        f.writelines(f"[{s:.2f} -> {e:.2f}]{t}\n" for s, e, t in theirs)
    with open(os.path.join(args.out, "polyattn.txt"), "w") as f:
        f.writelines(f"[{s:.2f} -> {e:.2f}]{t}\n" for s, e, t in ours)
    w_ours, w_theirs, w_between = wer(reference, our_text), wer(reference, their_text), wer(their_text, our_text)
    delta, pairs = mean_start_difference(theirs, ours)
    print(f"clip: {wav}, {seconds:.1f} s, {len(reference.split())} spoken words; beam size {args.beam_size}, "
          f"{args.threads} threads")
    print("| system | segments | WER vs spoken text | wall s (this run, model load included for polyattn) |")
    print("|---|---|---|---|")
    print(f"| polyattn (CLI defaults) | {len(ours)} | {w_ours[0]:.3f} ({w_ours[1]}/{w_ours[2]}) | {our_wall:.1f} |")
    print(f"| faster-whisper {version}, no VAD | {len(theirs)} | {w_theirs[0]:.3f} ({w_theirs[1]}/{w_theirs[2]}) | {their_wall:.1f} |")
    print(f"WER between the two transcripts (faster-whisper as reference): {w_between[0]:.3f} ({w_between[1]}/{w_between[2]})")
    print(f"mean |start difference| over {pairs} faster-whisper segments, each paired with the polyattn segment "
          f"overlapping it most: {delta:.3f} s")
    print(f"segments: {args.out}/polyattn.txt and {args.out}/faster_whisper.txt; polyattn's summary:")
    print("\n".join("  " + l for l in our_log.splitlines() if "fallback" in l or "repeated" in l or "window(s)," in l))
    return 0


if __name__ == "__main__":
    sys.exit(main())
