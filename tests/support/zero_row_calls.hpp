// A call with no rows (an empty batch, a prefill or append of no tokens) is valid and does
// nothing, for every variant: its hooks' matrix blocks of no rows must not touch memory (UBSan
// flags an offset null pointer), and the cache must stay as it was.
#pragma once

#include <doctest/doctest.h>

#include <span>

#include <polyattn/attention.hpp>
#include <polyattn/core/matrix.hpp>

namespace polyattn::testing {

/// `attn` (no sequence open) is prefilled with `rows` and `q` (n >= 1 rows); then every call is
/// made with no rows (`no_q`, `no_rows`), and an attend of q's last row must give the same
/// output, bit for bit, as before them.
template <class A>
void check_zero_row_calls(A& attn, const RowMatrixXf& q, const typename A::variant_type::Rows& rows, const RowMatrixXf& no_q,
                          const typename A::variant_type::Rows& no_rows) {
  using V = typename A::variant_type;
  const int out_width = V::output_width(attn.shape());
  const int n = int(q.rows());
  RowMatrixXf out(n, out_width), before(1, out_width), after(1, out_width), no_out(0, out_width);
  const int a = attn.open_sequence();
  attn.prefill(a, q, rows, Mask::causal, out);
  const int one[] = {a};
  attn.attend(one, q.bottomRows(1), before);
  const std::span<const int> no_sequences;
  attn.prefill(a, no_q, no_rows, Mask::causal, no_out);
  attn.prefill(a, no_q, no_rows, Mask::full, no_out);
  attn.append(a, no_rows);
  attn.decode(no_sequences, no_q, no_rows, no_out);
  attn.attend(no_sequences, no_q, no_out);
  const int b = attn.open_sequence();  // and on a sequence that holds nothing yet
  attn.prefill(b, no_q, no_rows, Mask::causal, no_out);
  CHECK(attn.length(a) == n);
  CHECK(attn.length(b) == 0);
  attn.attend(one, q.bottomRows(1), after);
  CHECK(after == before);
}

}  // namespace polyattn::testing
