#!/usr/bin/env bash
# The CUDA checks in one run on a machine with a GPU, from binaries built elsewhere:
#   bash bench/kernels/run_cuda_checks.sh BIN_DIR OUT_DIR
# BIN_DIR holds test_cuda_layout, test_cuda_equivalence, bench_cuda_prefill (and, optionally,
# test_whisper_cuda) and any shared library they need (libbenchmark) or LD_LIBRARY_PATH names
# them; OUT_DIR receives the logs and the benchmark's JSON (PREFILL_FILTER: its cases). Build them for the GPU's architecture and a host ISA the GPU machine
# has, e.g. cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
# -DPOLYATTN_NATIVE=OFF -DPOLYATTN_BUILD_BENCH=ON -DPOLYATTN_BUILD_EXAMPLES=OFF
# -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DCMAKE_CUDA_FLAGS=-Xcompiler=-march=x86-64-v3.
set -uo pipefail
bin=$(realpath "$1")
out=$2
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
grep -m1 "model name" /proc/cpuinfo | tee -a "$out/device.txt"
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-resource-usage "$bin/bench_cuda_prefill" > "$out/resource_usage.txt" 2>&1
  grep -A1 "attend_query_" "$out/resource_usage.txt" | grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*" | sort | uniq -c
fi
status=0
"$bin/test_cuda_layout" > "$out/test_cuda_layout.txt" 2>&1 || status=1
tail -3 "$out/test_cuda_layout.txt"
SECONDS=0
"$bin/test_cuda_equivalence" > "$out/test_cuda_equivalence.txt" 2>&1 || status=1
grep -E "ERROR|CHECK|with expansion|values:|^  [A-Za-z]|test cases|assertions|skipped" "$out/test_cuda_equivalence.txt" | head -60
echo "test_cuda_equivalence: ${SECONDS} s"
if [ -x "$bin/test_whisper_cuda" ]; then  # needs the model and ../shared/data where the build named them
  SECONDS=0
  "$bin/test_whisper_cuda" --test-suite=cuda > "$out/test_whisper_cuda.txt" 2>&1 || status=1
  grep -E "ERROR|skipped|test cases|assertions" "$out/test_whisper_cuda.txt" | head -20
  echo "test_whisper_cuda: ${SECONDS} s"
fi
"$bin/bench_cuda_prefill" --benchmark_filter="${PREFILL_FILTER:-.}" --benchmark_out="$out/prefill.json" --benchmark_out_format=json \
  > "$out/bench_cuda_prefill.txt" 2>&1 || status=1
grep "^BM_" "$out/bench_cuda_prefill.txt" | sed -E 's/min_time:0.200 *//; s/ +[0-9.]+ ms +[0-9.]+ ms +[0-9]+ / /' | cut -c1-170
exit $status
