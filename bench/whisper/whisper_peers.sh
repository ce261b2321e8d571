#!/usr/bin/env bash
# The Whisper CLI against CTranslate2 float32 and int8, and whisper.cpp when --whisper-cpp names a
# whisper-cli you built (its model file: bench/whisper/ggml_peer_model.sh), in fresh processes
# (bench/whisper/whisper_peers.py) with the given arguments (--runs N, --pairs, --threads), through
# bench/whisper/run_with_ctranslate2.sh.
# Exit 3: CTranslate2 could not be installed or run.
exec bash "$(dirname "$0")/run_with_ctranslate2.sh" bench/whisper/whisper_peers.py "$@"
