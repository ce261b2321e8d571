#!/usr/bin/env bash
# The Whisper CUDA table (examples/whisper/README.md): whisper_cuda --device cuda for four decoder
# policy pairs at batch 1, 16 and 64, then MHA at 64 without the temperature fallback; one fresh
# process per row, AUDIO repeated --batch times, greedy decoding:
#   bash bench/whisper/cuda_policies.sh WHISPER_CUDA MODEL_DIR AUDIO
# Prints per row the first file's tokens and the CLI's timing and memory lines.
set -u
bin=$1 model=$2 audio=$3
row() {  # self cross batch [more whisper_cuda arguments]
  local self=$1 cross=$2 n=$3
  shift 3
  local files=()
  for ((i = 0; i < n; ++i)); do files+=("$audio"); done
  local out
  out=$("$bin" --model "$model" --device cuda --threads "$(nproc)" --beam-size 1 --tokens --self "$self" --cross "$cross" \
        --batch "$n" "$@" --audio "${files[@]}" 2>&1)
  echo "== $self $cross $n $* rc=$?"
  grep -m1 "tokens: " <<<"$out" | cut -c1-220
  grep -E "  mel |decode steps|peak memory|peak device memory|rror" <<<"$out"
}
for pair in "mha/hnd baseline" "slimk/hnd e-cache" "xcache/hnd e-cache" "mla192/hnd baseline"; do
  for n in 1 16 64; do row $pair "$n"; done
done
row mha/hnd baseline 64 --temperature-fallback off
