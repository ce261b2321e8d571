#!/usr/bin/env bash
# Makes (once) the virtual environment build/venv-ctranslate2 with ctranslate2 and numpy from PyPI
# and prints its python's path; exit 3 when it cannot. Used by the CTranslate2 comparisons.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv-ctranslate2
if [[ ! -x "$venv/bin/python" ]]; then
  # Debian's python3 needs python3-venv (ensurepip) for this; .ci/setup installs it.
  if ! python3 -m venv "$venv" >&2; then
    echo "error: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
    rm -rf "$venv"
    exit 3
  fi
fi
if ! "$venv/bin/python" -c "import ctranslate2, numpy" 2>/dev/null; then
  if ! "$venv/bin/pip" install --quiet ctranslate2 numpy >&2; then
    echo "error: pip could not install ctranslate2 and numpy from PyPI" >&2
    exit 3
  fi
fi
echo "$PWD/$venv/bin/python"
