#!/usr/bin/env bash
# Builds whisper.cpp's CLI from its public source as a peer for bench/whisper_peers.py, the way
# its README builds it (CMake Release, GGML_NATIVE=ON: tuned for this CPU), and writes the ggml
# model file it reads from the same CTranslate2 tiny.en weights polyattn runs
# (bench/ct2_to_ggml.py).
#
#   bash bench/build_whisper_cpp.sh [SOURCE_DIR]
#
# SOURCE_DIR: a whisper.cpp checkout (v1.8 or later). Without it, tag $WHISPER_CPP_TAG (default
# v1.9.3) is cloned from GitHub into build/peers/whisper.cpp-src. Results:
#   build/peers/whisper.cpp/bin/whisper-cli
#   build/peers/ggml-tiny.en-ct2.bin  (checked: polyattn's CLI gives the same tokens from it as
#                                      from models/tiny.en)
# Exit 3 when whisper.cpp cannot be fetched or built, 4 when the ggml file does not check.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build/peers/whisper.cpp-src}
tag=${WHISPER_CPP_TAG:-v1.9.3}
out=build/peers
mkdir -p "$out"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  if [[ $# -ge 1 ]]; then
    echo "error: $src is not a whisper.cpp checkout" >&2
    exit 3
  fi
  git clone --quiet --depth 1 --branch "$tag" https://github.com/ggml-org/whisper.cpp "$src" ||
    { echo "error: could not clone whisper.cpp $tag; pass a checkout as SOURCE_DIR" >&2; exit 3; }
fi
echo "whisper.cpp: $(git -C "$src" describe --tags --always 2>/dev/null || echo "$src"), building (log: $out/whisper.cpp-build.log)"
{
  cmake -S "$src" -B "$out/whisper.cpp" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DWHISPER_SDL2=OFF &&
    cmake --build "$out/whisper.cpp" -j"$(nproc)" --target whisper-cli
} >"$out/whisper.cpp-build.log" 2>&1 || { tail -20 "$out/whisper.cpp-build.log" >&2; exit 3; }

# The model file, from the same weights; then checked with polyattn's own ggml reader.
venv=build/venv-ctranslate2
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/python" -c "import numpy" 2>/dev/null || "$venv/bin/pip" install --quiet numpy
"$venv/bin/python" bench/ct2_to_ggml.py models/tiny.en "$out/ggml-tiny.en-ct2.bin"
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
