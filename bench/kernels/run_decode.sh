#!/usr/bin/env bash
# Sets up, builds the benchmarks and runs the decode-variant comparison, printing the table.
# Extra arguments go to Google Benchmark (e.g. --benchmark_filter=heads:6).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash .ci/setup
cmake --workflow --preset bench
out=build/bench/decode.json
build/bench/bench/bench_decode --benchmark_out="$out" --benchmark_out_format=json "$@"
python3 bench/tables/decode_table.py "$out"
