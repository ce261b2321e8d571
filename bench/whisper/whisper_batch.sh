#!/usr/bin/env bash
# Batched Whisper decoding with the CLI: batch 1, 16 and 64 for the cross-cache options and the
# smallest exact self caches, then a Markdown table (bench/tables/whisper_batch_table.py) with each
# option's cross cache bytes and decode tokens/s against mha/nhd + baseline at the same batch.
#   bench/whisper/whisper_batch.sh [log dir]        (run from anywhere; paths are from the repo root)
# Environment: WHISPER (CLI, default build/release/examples/whisper/whisper), MODEL (default
# models/tiny.en), DATA (holds jfk.wav, default ../shared/data), BATCHES (default "1 16 64"),
# THREADS (default 2), BEAMS (beam sizes, default "1"), POLICIES (space-separated self+cross pairs,
# default below; "all": every pair `whisper --list-policies` names).
#   BEAMS="5 8" BATCHES="1 16" POLICIES=all bench/whisper/whisper_batch.sh   the beam memory table of
#   examples/whisper/README.md ("Beam search"): the beams of a window share its cross cache, and
#   on Paged<16> the pages of their common tokens.
#
# Each run decodes N copies of jfk.wav at --batch N: every sequence has the same length, so the
# batch stays full from the first step to the last and "batch N" means N sequences per step.
# (Different clips would end at different steps and shrink the batch in the tail.) The encoder
# runs once per window (~0.35 s each on an idle 2-core machine), so batch 64 spends ~20 s
# encoding per policy; the figure of interest is the decode time, which the CLI reports apart.
set -euo pipefail
cd "$(dirname "$0")/../.."

whisper=${WHISPER:-build/release/examples/whisper/whisper}
model=${MODEL:-models/tiny.en}
data=${DATA:-../shared/data}
batches=${BATCHES:-1 16 64}
threads=${THREADS:-2}
beams=${BEAMS:-1}  # 1: greedy, so that "batch N" means N sequences per step
policies=${POLICIES:-mha/nhd+baseline mha/nhd+k-only mha/nhd+e-cache mha/nhd+hybrid slimk/nhd+e-cache xcache/nhd+e-cache}
[[ $policies == all ]] && policies=$("$whisper" --list-policies | tr ' ' '+')
logs=${1:-$(mktemp -d "${TMPDIR:-/tmp}/whisper_batch.XXXXXX")}

for f in "$whisper" "$model/model.bin" "$data/jfk.wav"; do
  [[ -e $f ]] || { echo "whisper_batch.sh: $f is missing (build: cmake --preset release && cmake --build build/release -j2 --target whisper)" >&2; exit 1; }
done
mkdir -p "$logs"

for beam in $beams; do
for n in $batches; do
  audio=()
  for ((i = 0; i < n; ++i)); do audio+=("$data/jfk.wav"); done
  for p in $policies; do
    self=${p%+*}
    cross=${p#*+}
    log="$logs/b${n}_k${beam}_${self//\//_}_${cross}.log"
    # The load average goes into the log: the machine is shared, and a timing means little without it.
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" >"$log"
    echo "run: batch $n beam $beam --self $self --cross $cross" >>"$log"
    echo "batch $n, beam $beam: --self $self --cross $cross" >&2
    "$whisper" --model "$model" --audio "${audio[@]}" --batch "$n" --threads "$threads" --self "$self" --cross "$cross" \
      --beam-size "$beam" --timestamps off --temperature-fallback off 2>>"$log" >"$log.stdout"
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$log"
  done
done
done
echo "logs: $logs" >&2
python3 bench/tables/whisper_batch_table.py "$logs"/b*.log
