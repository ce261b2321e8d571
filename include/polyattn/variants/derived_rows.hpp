// Rows a variant derives from its cache at attend time, presented to the executor with the store
// interface it already reads (`row`, `run`). Tensors [0, store tensors) pass through to the cache;
// the ones after are dense matrices the variant filled for one sequence, e.g. slim attention's
// V = K W_KV (option 1) or keys rotated after reading (RoPE). Executors stay unaware of it.
// It reads the store only through that interface (no cache/ header): a run of derived rows is
// returned as the store's own run type (CacheRun<float>, cache/layout_traits.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

/// Copies tokens [0, n) of cached tensor `tensor` of `seq` into `dense` (n, heads * dim), heads
/// adjacent within a row, whatever the layout.
template <class Store>
void gather_rows(const Store& store, int tensor, int seq, int n, RowMatrixXf& dense) {
  using T = std::remove_cvref_t<decltype(*store.row(0, 0, 0, 0))>;
  static_assert(std::is_same_v<DecodedElement<T>, float> && !is_scaled_int8<T>,
                "polyattn: gather_rows reads float and 16-bit caches into float rows");
  const TensorSpec spec = store.tensors()[std::size_t(tensor)];
  dense.resize(n, std::ptrdiff_t(spec.heads) * spec.dim);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < spec.heads; ++h)
      decode_row(dense.row(t).data() + std::ptrdiff_t(h) * spec.dim, store.row(tensor, seq, t, h), spec.dim);
}

/// The store as the executor sees it for one sequence, plus `N` derived tensors.
template <class Store, std::size_t N>
class DerivedRows {
 public:
  using value_type = std::remove_cvref_t<decltype(*std::declval<const Store&>().row(0, 0, 0, 0))>;
  using run_type = decltype(std::declval<const Store&>().run(0, 0, 0, 0));  // the store's CacheRun<float>
  static_assert(std::is_same_v<value_type, float>,
                "polyattn: derived rows (slim attention option 1, RoPE after reading) need a float cache");

  /// derived[i] is (tokens, specs[i].heads * specs[i].dim), rows of sequence `seq`; it is tensor
  /// store_tensors + i of the view.
  DerivedRows(const Store& store, int seq, std::array<const RowMatrixXf*, N> derived, std::array<TensorSpec, N> specs)
      : store_(store), seq_(seq), first_derived_(int(store.tensors().size())), derived_(derived), specs_(specs) {}

  const float* row(int tensor, int seq, int token, int head) const {
    if (tensor < first_derived_) return store_.row(tensor, seq, token, head);
    return derived_row(tensor, seq, token, head);
  }

  run_type run(int tensor, int seq, int token, int head) const {
    if (tensor < first_derived_) return store_.run(tensor, seq, token, head);
    const RowMatrixXf& m = *derived_[std::size_t(tensor - first_derived_)];
    return run_type{derived_row(tensor, seq, token, head), std::ptrdiff_t(m.cols()), int(m.rows()) - token};
  }

 private:
  const float* derived_row(int tensor, int seq, int token, int head) const {
    const std::size_t i = std::size_t(tensor - first_derived_);
    require<ShapeError>(seq == seq_ && token < derived_[i]->rows(), "derived rows hold sequence ", seq_, " tokens [0, ",
                        derived_[i]->rows(), "), read of sequence ", seq, " token ", token);
    return derived_[i]->row(token).data() + std::ptrdiff_t(head) * specs_[i].dim;
  }

  const Store& store_;
  int seq_;
  int first_derived_;
  std::array<const RowMatrixXf*, N> derived_;
  std::array<TensorSpec, N> specs_;
};

}  // namespace polyattn
