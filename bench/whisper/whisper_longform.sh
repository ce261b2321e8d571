#!/usr/bin/env bash
# Long-form transcription against faster-whisper (bench/whisper/whisper_longform.py; its arguments pass
# through): makes (once) the virtual environment build/venv-faster-whisper with faster-whisper and
# python-soxr from PyPI and builds the `whisper` CLI when it is missing. Needs espeak-ng and
# ../shared/data/jfk.wav. Exit 3 when faster-whisper cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=build/venv-faster-whisper
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv" || { echo "error: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2; rm -rf "$venv"; exit 3; }
fi
if ! "$venv/bin/python" -c "import faster_whisper, soxr" 2>/dev/null; then
  "$venv/bin/pip" install --quiet faster-whisper soxr || { echo "error: pip could not install faster-whisper and soxr" >&2; exit 3; }
fi
if [[ ! -x build/release/examples/whisper/whisper ]]; then
  cmake --preset release >/dev/null
  cmake --build build/release -j2 --target whisper
fi
exec "$venv/bin/python" bench/whisper/whisper_longform.py "$@"
