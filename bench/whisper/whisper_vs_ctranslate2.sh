#!/usr/bin/env bash
# Compares the Whisper example with CTranslate2 (bench/whisper/whisper_vs_ctranslate2.py) with the
# given arguments (default: ../shared/data/jfk.wav, 2 threads), through
# bench/whisper/run_with_ctranslate2.sh.
# Exit code 3: CTranslate2 could not be installed or run; see the script for the others.
exec bash "$(dirname "$0")/run_with_ctranslate2.sh" bench/whisper/whisper_vs_ctranslate2.py "$@"
