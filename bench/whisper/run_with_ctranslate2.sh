#!/usr/bin/env bash
# Runs a CTranslate2 comparison script (bench/whisper/whisper_vs_ctranslate2.py,
# bench/whisper/whisper_peers.py) with its arguments: makes (once) the virtual environment build/venv-ctranslate2 with ctranslate2
# and numpy from PyPI and builds the `whisper` CLI when it is missing. Exit 3 when CTranslate2
# cannot be installed; the scripts' own exit codes otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
script=$1
shift
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
exec "$venv/bin/python" "$script" "$@"
