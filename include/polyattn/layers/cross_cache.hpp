// Cross-attention caches for encoder-decoder models (Whisper, T5), one compile-time option for
// every decoder layer (seeds: slim-attention §6, executorch cross-KV PR, whisper explainer):
//
//   cross::Baseline  per layer K = E W_k + b_k, V = E W_v + b_v, computed once per sequence at its
//                    first decode step and reused (2 p d per layer)
//   cross::KOnly     per layer K = E W_k only; V from K through W_kv (slim option 2; p d per layer)
//   cross::SharedE   one E-cache (the encoder output, p d) read by every layer through the X-cache
//                    trick; no cross phase at all
//   cross::Hybrid    layer 0 K-only (K_0 = E W_k0); the other layers read K_0 as their X-cache,
//                    with W_k,l and W_v,l replaced offline by W_k0^-1 W_k,l and W_k0^-1 W_v,l
//                    (p d for the whole model, and layer 0 reads W_kv0 instead of W_k0 and W_v0)
//
// A layer module, not a variant: it composes the variants Mha, SlimK2 and XCache (variants/), the
// conversions of convert/, a cache store per its Layout and an Executor, and calls the attend step
// (core/attend_with_hooks.hpp) itself, as Attention does, because one cache may be read by every
// layer with different weights. Layout, Executor and the cache element type T are the caller's
// choice, as for Attention<Variant, Layout, Executor, T>; include the headers of the layout
// (cache/contiguous.hpp, cache/paged.hpp) and executor (exec/...) you pick.
//
// Use, per model:
//   CrossAttention<cross::SharedE, Nhd, exec::CpuSimd> cross(shape, layer_weights, {.max_sequences = B, .capacity = 1500});
//   int s = cross.open_sequence();
//   cross.set_encoder_output(s, E);                  // (p, d), once per audio
//   cross.attend(layer, seqs, x, y);                 // every decode step, every layer
//   cross.close_sequence(s);
// x is the decoder's normalised hidden state (rows, d), one row per entry of `seqs` (a sequence
// may repeat: several prompt tokens of one sequence); y (rows, d) is the cross-attention
// output after W_o and b_o, whatever the option. Beams of one audio can share one sequence.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/convert/mha_weights.hpp"
#include "polyattn/convert/slim_k.hpp"
#include "polyattn/convert/x_cache.hpp"
#include "polyattn/core/attend.hpp"
#include "polyattn/core/attend_with_hooks.hpp"
#include "polyattn/core/cache_element.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/shape.hpp"
#include "polyattn/core/threads.hpp"
#include "polyattn/variants/mha_gqa.hpp"
#include "polyattn/variants/slim_k.hpp"
#include "polyattn/variants/x_cache.hpp"

namespace polyattn {

namespace cross {
struct Baseline {
  static std::string name() { return "baseline"; }
};
struct KOnly {
  static std::string name() { return "k-only"; }
};
struct SharedE {
  static std::string name() { return "e-cache"; }
};
struct Hybrid {
  static std::string name() { return "hybrid"; }
};
}  // namespace cross

template <class Option, class Layout, class Executor, class T = float>
class CrossAttention {
  static_assert(CacheElement<T> && !is_scaled_int8<T>,
                "polyattn: CrossAttention's cache element type T must be float, double, Eigen::half or Eigen::bfloat16 "
                "(int8 caches are Attention's only, for now: core/cache_element.hpp)");
  static constexpr bool kBaseline = std::is_same_v<Option, cross::Baseline>;
  static constexpr bool kKOnly = std::is_same_v<Option, cross::KOnly>;
  static constexpr bool kSharedE = std::is_same_v<Option, cross::SharedE>;
  static constexpr bool kHybrid = std::is_same_v<Option, cross::Hybrid>;
  static_assert(kBaseline || kKOnly || kSharedE || kHybrid,
                "polyattn: CrossAttention<Option> takes cross::Baseline, cross::KOnly, cross::SharedE or cross::Hybrid");
  static constexpr bool kPerLayerStores = kBaseline || kKOnly;
  // An executor that mirrors the cache on a device (exec::Cuda) keeps the mirror of one store and
  // starts over (re-uploads every row) when it is handed another: per-layer stores would be
  // re-uploaded at every layer of every step. Those options get one executor per store there.
  static constexpr bool kExecutorPerStore = kPerLayerStores && requires { Executor::mirrors_cache_rows; };
  using Store = CacheStore<Layout, T>;

 public:
  /// `shape`: heads of the cross-attention; shape.model_dim = d (0 means n_heads * head_dim).
  /// `layers`: every decoder layer's cross-attention weights (MHA). K-only and hybrid convert
  /// them (see reports()); the conversion throws ConversionError where it cannot be faithful.
  CrossAttention(AttentionShape shape, const std::vector<MhaWeights>& layers, CacheConfig config, Threads threads = {})
      : shape_(shape), pending_(std::size_t(config.max_sequences)) {
    require<ShapeError>(!layers.empty(), "CrossAttention: no layers");
    for (const MhaWeights& w : layers) check_mha_weights(w, shape_);
    const int d = shape_.input_width(), e = shape_.query_width();
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const MhaWeights& w = layers[l];
      Layer layer;
      layer.w_q = w.w_q;
      layer.b_q = bias_or_zero(w.b_q, e);
      layer.w_o = w.w_o;
      layer.b_o = bias_or_zero(w.b_o, d);
      if constexpr (kBaseline) {
        layer.w_k = w.w_k;
        layer.b_k = bias_or_zero(w.b_k, e);
        layer.w_v = w.w_v;
        layer.b_v = bias_or_zero(w.b_v, e);
      } else if constexpr (kKOnly) {
        SlimKWeights slim = convert_to_slim_k(w, {.layer = int(l)});
        layer.w_k = w.w_k;
        layer.slim.w_kv = std::move(slim.w_kv);
        layer.b_o = slim.b_o;
        reports_.push_back(slim.report);
      } else if constexpr (kSharedE) {
        layer.xcache = make_x_cache_params(w, shape_);
      } else if (l == 0) {  // hybrid, layer 0: K-only over K_0 = E W_k0
        require<ShapeError>(d == e, "CrossAttention<hybrid>: layer 0's W_k must be square (d = ", d, ", e = ", e,
                            ") so that other layers can read E = K_0 W_k0^-1 with their queries of width d");
        SlimKWeights slim = convert_to_slim_k(w, {.layer = 0});
        layer.w_k = w.w_k;
        layer.slim.w_kv = std::move(slim.w_kv);
        layer.b_o = slim.b_o;
        reports_.push_back(slim.report);
      } else {  // hybrid, other layers: X-cache over K_0 with W_k0^-1 W_k,l and W_k0^-1 W_v,l
        MhaWeights moved = w;
        SlimKReport report;
        std::tie(moved.w_k, report) = apply_key_inverse(layers[0].w_k, w.w_k, {.layer = int(l)});
        std::tie(moved.w_v, std::ignore) = apply_key_inverse(layers[0].w_k, w.w_v, {.layer = int(l)});
        reports_.push_back(report);
        layer.xcache = make_x_cache_params(moved, shape_);
      }
      layers_.push_back(std::move(layer));
    }
    const int n_stores = kPerLayerStores ? int(layers_.size()) : 1;
    for (int i = 0; i < n_stores; ++i) stores_.emplace_back(std::make_unique<Store>(tensors_of(i), config));
    for (int i = 0; i < (kExecutorPerStore ? n_stores : 1); ++i) executors_.emplace_back(std::make_unique<Executor>(threads));
  }

  using option_type = Option;
  using layout_type = Layout;
  using executor_type = Executor;
  using value_type = T;

  static std::string name() { return "cross-" + Option::name() + "/" + Layout::name() + "/" + Executor::name(); }

  int layers() const { return int(layers_.size()); }
  const AttentionShape& shape() const { return shape_; }
  /// Conversion figures (cond(W_k), max|W_kv|) of the layers this option converted.
  const std::vector<SlimKReport>& reports() const { return reports_; }

  int open_sequence() {
    int seq = -1;
    for (auto& s : stores_) seq = s->open();  // stores open in lockstep: same slot everywhere
    return seq;
  }

  void close_sequence(int seq) {
    for (auto& s : stores_) s->close(seq);
    pending_[std::size_t(seq)] = RowMatrixXf();
  }

  /// The encoder output E (p, d) of `seq`, once per audio. SharedE caches it as is; the others
  /// keep it until each layer's first attend projects it (the first decode step).
  void set_encoder_output(int seq, ConstMatrixRef e) {
    require<ShapeError>(e.cols() == shape_.input_width(), "set_encoder_output: E has ", e.cols(), " columns, expected d = ",
                        shape_.input_width());
    require<ShapeError>(e.rows() >= 1, "set_encoder_output: E has no rows");
    for (auto& s : stores_) {
      require<ShapeError>(s->length(seq) == 0, "set_encoder_output: sequence ", seq, " already has its encoder output");
      s->check_room(seq, int(e.rows()));
    }
    if constexpr (kSharedE)
      write(*stores_[0], seq, XCache::Rows{e}, XCache{}, layers_[0].xcache);
    else
      pending_[std::size_t(seq)] = e;
  }

  /// y (rows, d) = cross-attention of decoder layer `layer` for x (rows, d); row i queries seqs[i].
  void attend(int layer, std::span<const int> seqs, ConstMatrixRef x, MatrixRef y) {
    require<ShapeError>(layer >= 0 && layer < layers(), "attend: layer ", layer, " out of range [0, ", layers(), ")");
    const auto rows = std::ptrdiff_t(seqs.size());
    require<ShapeError>(x.rows() == rows && y.rows() == rows, "attend: ", rows, " sequences but x has ", x.rows(),
                        " rows and y ", y.rows());
    require<ShapeError>(x.cols() == shape_.input_width() && y.cols() == shape_.input_width(), "attend: x and y need d = ",
                        shape_.input_width(), " columns, got ", x.cols(), " and ", y.cols());
    Store& store = *stores_[kPerLayerStores ? std::size_t(layer) : 0];
    Executor& executor = *executors_[kExecutorPerStore ? std::size_t(layer) : 0];
    check_cacheable(layer, seqs);
    for (int seq : seqs) ensure_cached(layer, seq);
    jobs_.clear();
    for (int seq : seqs) jobs_.push_back({seq, store.length(seq), nullptr, nullptr});
    const Layer& w = layers_[std::size_t(layer)];
    heads_.resize(rows, shape_.query_width());
    if constexpr (kSharedE) {
      run<XCache>(w.xcache, store, executor, x);
    } else if (kHybrid && layer > 0) {
      run<XCache>(w.xcache, store, executor, x);
    } else {
      query_.noalias() = x * w.w_q;
      query_.rowwise() += w.b_q;
      if constexpr (kBaseline) run<Mha>(typename Mha::Params{}, store, executor, query_);
      else run<SlimK2>(w.slim, store, executor, query_);
    }
    y.noalias() = heads_ * w.w_o;
    y.rowwise() += w.b_o;
  }

  /// Bytes of cross cache holding `seq` (all layers).
  std::size_t cache_bytes(int seq) const {
    std::size_t bytes = 0;
    for (const auto& s : stores_) bytes += std::size_t(s->length(seq)) * bytes_per_frame(*s);
    return bytes;
  }

  /// Bytes one encoder frame costs over all layers (the option's whole point: 2 L d elements of T
  /// for the baseline, L d for K-only, d for the shared E-cache and the hybrid).
  std::size_t cache_bytes_per_frame() const {
    std::size_t bytes = 0;
    for (const auto& s : stores_) bytes += bytes_per_frame(*s);
    return bytes;
  }

  /// y (p, out) = E (p, in) W for W (in, out) row-major: the product that projects a sequence's
  /// encoder output into a layer's K (and V) at its first attend (Baseline: two per layer,
  /// KOnly: one, Hybrid: one for layer 0, SharedE: none). 2 p d^2 multiply-adds each, the largest
  /// products the module runs. Eigen's by default; a caller with a faster GEMM (a BLAS, oneDNN)
  /// passes its own here. It must write every element of y and leave x and W as they are; what
  /// it throws leaves the caches as they were (the sequence's K/V are written after both products).
  using EncoderProjection = void (*)(ConstMatrixRef x, ConstMatrixRef w, MatrixRef y);
  static void eigen_projection(ConstMatrixRef x, ConstMatrixRef w, MatrixRef y) { y.noalias() = x * w; }
  void set_encoder_projection(EncoderProjection projection) { project_ = projection ? projection : &eigen_projection; }

  /// Bytes the cache stores reserved (capacity for every sequence slot).
  std::size_t cache_bytes_allocated() const {
    std::size_t bytes = 0;
    for (const auto& s : stores_) bytes += s->bytes_allocated();
    return bytes;
  }

 private:
  struct Layer {
    RowMatrixXf w_q, w_k, w_v, w_o;
    Eigen::RowVectorXf b_q, b_k, b_v, b_o;
    SlimK2::Params slim;
    XCache::Params xcache;
  };

  static std::size_t bytes_per_frame(const Store& store) {
    std::size_t elements = 0;
    for (const TensorSpec& t : store.tensors()) elements += t.elements();
    return elements * sizeof(T);
  }

  std::vector<TensorSpec> tensors_of(int store) const {
    if constexpr (kBaseline) return Mha::cache_tensors(shape_, {});
    else if constexpr (kKOnly) return SlimK2::cache_tensors(shape_, layers_[std::size_t(store)].slim);
    else if constexpr (kSharedE) return XCache::cache_tensors(shape_, layers_[0].xcache);
    else return SlimK2::cache_tensors(shape_, layers_[0].slim);  // K_0 rows, read by XCache layers as width-d rows
  }

  template <class V>
  void write(Store& store, int seq, const typename V::Rows& rows, V, const typename V::Params& params) {
    const int n = V::row_count(rows);
    const int pos = store.grow(seq, n);
    V::write_rows(store, seq, pos, shape_, params, rows, 0, n);
  }

  /// Checks, before layer `layer`'s first attend projects any of them, that every sequence of
  /// `seqs` has its encoder output and that the layer's store has room for all of those it has
  /// not cached yet (a paged pool is shared by them), so a failed attend caches nothing.
  void check_cacheable(int layer, std::span<const int> seqs) {
    const Store& store = *stores_[kPerLayerStores ? std::size_t(layer) : 0];
    requests_.clear();
    for (int seq : seqs) {
      if (store.length(seq) > 0) continue;  // cached (length throws SequenceError for a sequence that is not open)
      const Eigen::Index rows = kSharedE ? 0 : pending_[std::size_t(seq)].rows();
      require<ShapeError>(rows > 0, "attend: sequence ", seq, " has no encoder output (set_encoder_output)");
      if (std::none_of(requests_.begin(), requests_.end(), [&](const RowRequest& r) { return r.seq == seq; }))
        requests_.push_back({seq, int(rows)});  // a sequence may repeat in seqs: once per sequence
    }
    store.check_room(requests_);
  }

  /// Projects the pending encoder output into layer `layer`'s cache on its first use (after
  /// check_cacheable).
  void ensure_cached(int layer, int seq) {
    if constexpr (!kSharedE) {
      Store& store = *stores_[kPerLayerStores ? std::size_t(layer) : 0];
      if (store.length(seq) > 0) return;
      const RowMatrixXf& e = pending_[std::size_t(seq)];
      const Layer& w = layers_[kPerLayerStores ? std::size_t(layer) : 0];
      if constexpr (kBaseline) {
        RowMatrixXf k(e.rows(), w.w_k.cols()), v(e.rows(), w.w_v.cols());
        project_(e, w.w_k, k);
        project_(e, w.w_v, v);
        k.rowwise() += w.b_k;
        v.rowwise() += w.b_v;
        write(store, seq, Mha::Rows{k, v}, Mha{}, {});
      } else {
        RowMatrixXf k(e.rows(), w.w_k.cols());
        project_(e, w.w_k, k);  // no key bias: it cancels (and E = K_0 W_k0^-1 needs none)
        write(store, seq, SlimK2::Rows{k}, SlimK2{}, w.slim);
      }
      bool all_cached = true;
      for (auto& s : stores_) all_cached = all_cached && s->length(seq) > 0;
      if (all_cached) pending_[std::size_t(seq)] = RowMatrixXf();
    }
  }

  template <class V>
  void run(const typename V::Params& params, const Store& store, Executor& executor, ConstMatrixRef q) {
    AttentionShape shape = shape_;
    if constexpr (std::is_same_v<V, XCache>) shape.model_dim = shape_.input_width();
    auto& scratch = std::get<AttendScratch<V>>(scratch_);
    attend_with_hooks<V>(shape, params, V::attend_spec(shape, params), store, executor, std::span<QueryJob>(jobs_), q, heads_,
                         scratch);
  }

  AttentionShape shape_;
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<Store>> stores_;
  std::vector<std::unique_ptr<Executor>> executors_;  // one, or one per store (kExecutorPerStore)
  std::vector<RowMatrixXf> pending_;  // per sequence slot: E until every layer has projected it
  std::vector<SlimKReport> reports_;
  std::vector<QueryJob> jobs_;
  std::vector<RowRequest> requests_;  // check_cacheable's
  RowMatrixXf query_, heads_;
  EncoderProjection project_ = &eigen_projection;
  std::tuple<AttendScratch<Mha>, AttendScratch<SlimK2>, AttendScratch<XCache>> scratch_;
};

}  // namespace polyattn
