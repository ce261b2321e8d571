#!/usr/bin/env bash
# A/B of the CPU decode kernels between a base commit and the working tree, in one process:
# compiles ab_decode.cpp twice into shared objects (the same source, once against BASE's include/
# and once against this tree's; g++ -O3 -march=native, as the bench preset), and ab_main calls
# their decode steps alternately (ab_main.cpp says what it prints). Name unchanged cases beside
# the changed ones as controls: a ratio of about 1 for them says the comparison is fair.
#   bench/ab/ab_headers.sh BASE L BATCH ROUNDS case [case ...]
#   e.g. bench/ab/ab_headers.sh HEAD 65536 16 15 xc_f32_hnd slim_f16_hnd mha_f16_hnd
set -euo pipefail
if (($# < 5)); then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
base=$1 length=$2 batch=$3 rounds=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add --detach "$work/base" "$base" >/dev/null 2>&1
cases() {  # include dir, output
  g++ -std=c++20 -O3 -DNDEBUG -march=native -fPIC -shared -fvisibility=hidden -fvisibility-inlines-hidden -Wl,-Bsymbolic \
    -I"$1" -I/usr/include/eigen3 "$here/ab_decode.cpp" -o "$2" -pthread
}
cases "$work/base/include" "$work/before.so" &
cases "$repo/include" "$work/after.so" &
g++ -std=c++20 -O2 "$here/ab_main.cpp" -o "$work/ab_main" -ldl
wait %1  # each on its own: with set -e, a failed build stops the script
wait %2
"$work/ab_main" "$work/before.so" "$work/after.so" "$length" "$batch" "$rounds" "$@"
