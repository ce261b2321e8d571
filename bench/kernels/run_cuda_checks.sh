#!/usr/bin/env bash
# The CUDA checks in one run on a machine with a GPU, from binaries built elsewhere:
#   bash bench/kernels/run_cuda_checks.sh BIN_DIR OUT_DIR
# BIN_DIR holds test_cuda_layout, test_cuda_equivalence, bench_cuda_decode, bench_cuda_prefill
# (and, optionally, test_whisper_cuda and whisper_cuda) and any shared library they need
# (libbenchmark, and the Whisper example's libdnnl, libsndfile, libsoxr) or LD_LIBRARY_PATH names
# them; OUT_DIR receives the logs and the benchmarks' JSON. Build them for the GPU's architecture
# and a host ISA the GPU machine has, e.g. cmake -S . -B build/gpu -G Ninja
# -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DPOLYATTN_NATIVE=OFF -DPOLYATTN_BUILD_BENCH=ON
# -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DCMAKE_CUDA_FLAGS=-Xcompiler=-march=x86-64-v3
# (test_whisper_cuda finds the model and ../shared/data where -DPOLYATTN_WHISPER_MODEL_DIR and
# -DPOLYATTN_SHARED_DATA_DIR named them). What runs, each under a time limit (seconds):
#   STAGES        which of tests, decode, prefill, whisper (default "tests decode prefill whisper")
#   DECODE_FILTER bench_cuda_decode's --benchmark_filter (default: all), DECODE_LIMIT (default 300)
#   PREFILL_FILTER bench_cuda_prefill's, PREFILL_LIMIT (default 300)
#   MODEL, AUDIO  whisper: the model directory and a WAV file; whisper_cuda --device cuda transcribes
#                 AUDIO at batch 1, 16 and 64 (copies of the file) for every CUDA policy pair
set -uo pipefail
bin=$(realpath "$1")
out=$2
mkdir -p "$out"
stages=" ${STAGES:-tests decode prefill whisper} "
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
grep -m1 "model name" /proc/cpuinfo | tee -a "$out/device.txt"
status=0
run() {  # run LIMIT LOG COMMAND...: the command's output in OUT_DIR/LOG, its time on stdout
  local limit=$1 log=$2
  shift 2
  SECONDS=0
  timeout "$limit" "$@" < /dev/null > "$out/$log" 2>&1
  local rc=$?
  echo "$log: rc $rc in ${SECONDS} s"
  [ "$rc" -eq 0 ] || status=1
}

if [[ $stages == *" tests "* ]]; then
  if command -v cuobjdump >/dev/null; then
    cuobjdump --dump-resource-usage "$bin/test_cuda_equivalence" > "$out/resource_usage.txt" 2>&1
    grep -A1 -E "attend_(stream|tiles)" "$out/resource_usage.txt" | grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*" | sort | uniq -c
  fi
  run 60 test_cuda_layout.txt "$bin/test_cuda_layout"
  tail -3 "$out/test_cuda_layout.txt"
  run "${EQUIVALENCE_LIMIT:-300}" test_cuda_equivalence.txt "$bin/test_cuda_equivalence"
  grep -E "ERROR|CHECK|with expansion|values:|^  [A-Za-z]|test cases|assertions|skipped" "$out/test_cuda_equivalence.txt" | head -60
fi

if [[ $stages == *" decode "* ]]; then
  run "${DECODE_LIMIT:-300}" bench_cuda_decode.txt "$bin/bench_cuda_decode" --benchmark_filter="${DECODE_FILTER:-.}" \
    --benchmark_out="$out/decode.json" --benchmark_out_format=json
  grep -E "^BM_" "$out/bench_cuda_decode.txt" | grep -o -E "^BM_[^ ]*|of_d2d_bw=[0-9.]+|kernel_GB_per_s=[0-9.]+[kMG]?|kernel_vs_mha=[0-9.]+|ERROR.*" |
    paste -sd' ' | sed -E 's/ BM_/\nBM_/g; s#/min_time:0.200/real_time##g'
  echo
fi

if [[ $stages == *" prefill "* ]]; then
  run "${PREFILL_LIMIT:-300}" bench_cuda_prefill.txt "$bin/bench_cuda_prefill" --benchmark_filter="${PREFILL_FILTER:-.}" \
    --benchmark_out="$out/prefill.json" --benchmark_out_format=json
  grep "^BM_" "$out/bench_cuda_prefill.txt" | sed -E 's/min_time:0.200 *//; s/ +[0-9.]+ ms +[0-9.]+ ms +[0-9]+ / /' | cut -c1-170
fi

if [[ $stages == *" whisper "* ]]; then
  if [ -x "$bin/test_whisper_cuda" ]; then
    run 300 test_whisper_cuda.txt "$bin/test_whisper_cuda" --test-suite=cuda
    grep -E "ERROR|skipped|test cases|assertions" "$out/test_whisper_cuda.txt" | head -20
  fi
  if [ -x "$bin/whisper_cuda" ] && [ -n "${MODEL:-}" ] && [ -n "${AUDIO:-}" ]; then
    copies=$(mktemp -d)
    for i in $(seq -w 1 64); do ln -s "$(realpath "$AUDIO")" "$copies/clip$i.wav"; done
    # Not a pipeline: the loop must run in this shell, so that a failed row sets `status`.
    while read -r self cross; do
      for batch in 1 16 64; do
        files=("$copies"/clip*.wav)
        log="whisper_${self//\//_}_${cross}_b$batch.txt"
        run 120 "$log" "$bin/whisper_cuda" --device cuda --model "$MODEL" --self "$self" --cross "$cross" --batch "$batch" --tokens \
          --audio "${files[@]:0:$batch}"
        grep -E "encode|tokens/s|peak device|clip01.wav:tokens" "$out/$log" | sed "s|^|  $self $cross b$batch: |" | cut -c1-230
      done
    done < <("$bin/whisper_cuda" --device cuda --list-policies)
  fi
fi
exit $status
