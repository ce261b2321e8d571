#!/usr/bin/env bash
# Compares the Whisper example with CTranslate2 (bench/whisper_vs_ctranslate2.py): makes a
# virtual environment under build/ with ctranslate2 and numpy from PyPI, builds the `whisper`
# CLI, then runs the script with the given arguments (default: ../shared/data/jfk.wav, 2 threads).
# Exit code 3: CTranslate2 could not be installed or run; see the script for the others.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv-ctranslate2
if [[ ! -x "$venv/bin/python" ]]; then
  # Debian's python3 needs python3-venv (ensurepip) for this; .ci/setup installs it.
  if ! python3 -m venv "$venv"; then
    echo "error: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
    rm -rf "$venv"
    exit 3
  fi
fi
if ! "$venv/bin/python" -c "import ctranslate2, numpy" 2>/dev/null; then
  if ! "$venv/bin/pip" install --quiet ctranslate2 numpy; then
    echo "error: pip could not install ctranslate2 and numpy from PyPI" >&2
    exit 3
  fi
fi
if [[ ! -x build/release/examples/whisper/whisper ]]; then
  cmake --preset release >/dev/null
  cmake --build build/release -j2 --target whisper
fi
exec "$venv/bin/python" bench/whisper_vs_ctranslate2.py "$@"
