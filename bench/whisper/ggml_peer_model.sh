#!/usr/bin/env bash
# Writes the ggml model file that whisper.cpp reads, from the same CTranslate2 tiny.en weights
# polyattn runs (bench/whisper/ct2_to_ggml.py: float16 matrices, float32 vectors), and checks it with
# polyattn's own ggml reader: the CLI must give the same jfk.wav tokens from it as from
# models/tiny.en. bench/whisper/whisper_peers.py then runs a whisper-cli you built (--whisper-cpp PATH)
# on it. Result: build/peers/ggml-tiny.en-ct2.bin. Exit 4 when the file does not check.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/peers
mkdir -p "$out"
# The model file, from the same weights; then checked with polyattn's own ggml reader.
venv=build/venv-ctranslate2
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/python" -c "import numpy" 2>/dev/null || "$venv/bin/pip" install --quiet numpy
"$venv/bin/python" bench/whisper/ct2_to_ggml.py models/tiny.en "$out/ggml-tiny.en-ct2.bin"
if [[ ! -x build/release/examples/whisper/whisper ]]; then
  cmake --preset release >/dev/null
  cmake --build build/release -j2 --target whisper
fi
cli=build/release/examples/whisper/whisper
check=(--audio ../shared/data/jfk.wav --tokens --beam-size 1 --timestamps off --temperature-fallback off)
a=$("$cli" --model models/tiny.en "${check[@]}" 2>/dev/null | grep ':tokens:')
b=$("$cli" --model "$out/ggml-tiny.en-ct2.bin" "${check[@]}" 2>/dev/null | grep ':tokens:')
if [[ -z "$a" || "$a" != "$b" ]]; then
  echo "error: polyattn's tokens from $out/ggml-tiny.en-ct2.bin differ from models/tiny.en's" >&2
  exit 4
fi
echo "ggml file checked: polyattn gives the same jfk.wav tokens from it as from models/tiny.en"
