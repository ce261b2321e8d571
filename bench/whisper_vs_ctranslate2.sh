#!/usr/bin/env bash
# Compares the Whisper example with CTranslate2 (bench/whisper_vs_ctranslate2.py): makes the
# virtual environment (bench/ctranslate2_venv.sh), builds the `whisper` CLI, then runs the script
# with the given arguments (default: ../shared/data/jfk.wav, 2 threads).
# Exit code 3: CTranslate2 could not be installed or run; see the script for the others.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bash bench/ctranslate2_venv.sh)
if [[ ! -x build/release/examples/whisper/whisper ]]; then
  cmake --preset release >/dev/null
  cmake --build build/release -j2 --target whisper
fi
exec "$python" bench/whisper_vs_ctranslate2.py "$@"
