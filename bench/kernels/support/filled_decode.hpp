// A decode step's set-up, shared by bench_decode_variants (BM_DecodeVariant,
// decode_variant_case.hpp) and the A/B cases (bench/ab/ab_decode.cpp), so that both time the same
// step: Attention<V, Layout, Executor, T> with 6 heads of 64 (Whisper tiny), `batch` sequences of
// `length` cached tokens on 2 MiB pages where Linux gives them, and one query per sequence, all
// drawn from seed 42. Includes its neighbours by their own names: ab_decode.cpp is compiled
// without bench/kernels on the include path.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "variant_inputs.hpp"

namespace polyattn::bench {

template <class V, class Layout, class T, class Executor = exec::CpuSimd>
struct FilledDecode {
  using A = Attention<V, Layout, Executor, T>;
  static constexpr AttentionShape shape{6, 64};

  std::mt19937 rng{42};
  std::unique_ptr<A> attn;  // (behind a pointer: its parameters come from rng, after the inputs')
  std::vector<int> seqs;
  RowMatrixXf q;    // (batch, query_width)
  RowMatrixXf out;  // (batch, output_width)

  FilledDecode(int length, int batch) {
    const Inputs<V> inputs(shape, rng);
    attn = std::make_unique<A>(shape, CacheConfig{.max_sequences = batch, .capacity = length, .huge_pages = true},
                               Inputs<V>::params(shape, rng), 0);
    for (int b = 0; b < batch; ++b) seqs.push_back(attn->open_sequence());
    fill_cache(*attn, seqs, length, [&](A& a, int seq, int n) { a.append(seq, inputs.rows(n)); });
    q = uniform(batch, V::query_width(shape), rng);
    out = RowMatrixXf(batch, V::output_width(shape));
  }
};

}  // namespace polyattn::bench
