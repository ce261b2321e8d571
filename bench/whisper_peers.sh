#!/usr/bin/env bash
# The Whisper CLI against CTranslate2 float32 and int8 in fresh processes (bench/whisper_peers.py):
# makes the virtual environment (bench/ctranslate2_venv.sh), builds the `whisper` CLI, then runs
# the script with the given arguments (--runs N, --pairs, --threads). Exit 3: CTranslate2 could
# not be installed or run.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bash bench/ctranslate2_venv.sh)
if [[ ! -x build/release/examples/whisper/whisper ]]; then
  cmake --preset release >/dev/null
  cmake --build build/release -j2 --target whisper
fi
exec "$python" bench/whisper_peers.py "$@"
