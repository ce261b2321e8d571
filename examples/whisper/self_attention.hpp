// Decoder self-attention policies. A policy S owns one decoder layer's self-attention
// sub-layer for a batch of sequences: the projections, a polyattn Attention with its cache,
// and the output projection (the decoder keeps the LayerNorm and the residual). Owning the
// projections lets a variant fold weights (slim attention's b_v into b_o, MLA's W_uv into W_o).
//
//   S::name()                                  the --self name, e.g. "mha/nhd"
//   S(const DecoderBlock&, const WhisperDims&, const DecoderConfig&, int layer)
//   int  open_sequence();  void close_sequence(int seq);
//   int  fork_sequence(int seq);               a new sequence holding seq's tokens (a beam)
//   void prefill(seqs, x, out)   x, out: (n * B, d), B = seqs.size(), position-major: row
//                                p * B + i is token p of seqs[i]'s chunk; causal over what the
//                                sequence holds and the chunk
//   void decode(seqs, x, out)    x, out: (B, d), one new token per sequence
//   CacheUse cache_use() const   this layer's cache: bytes per token, tokens held, bytes (shared once and as if copied)
//   std::string note() const     what the conversion measured or decided for this layer ("" if nothing)
//
// x is the layer-normed decoder state; out is the sub-layer's output after W_o. The decoder
// checks ids, tokens and the 448-token context before it calls a policy.
//
// The policies here are one template, SelfAttention<Kind, Layout>: a Kind (self_variants.hpp)
// converts the pretrained weights of a layer into a polyattn Variant's projections and
// parameters; the layer then runs x -> [q | cached parts] (one GEMM), Attention, W_o.
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/core/error.hpp>
#include <polyattn/core/threads.hpp>
#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/variants/mha_gqa.hpp>

#include "onednn_dense.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

// What a Decoder needs to build its attention policies.
struct DecoderConfig {
  int max_sequences = 1;  // sequences decoded at once (the batch; beams count one each)
  int max_audio = 0;      // audio windows open at once, each with its cross cache shared by its
                          // sequences (beams); 0 = max_sequences
  int audio_slots() const { return max_audio > 0 ? max_audio : max_sequences; }
  // The attention executors' threads: a count (0 = usable_cores()) for pools of their own,
  // or a lent team (openmp_team: the products' OpenMP threads, as transcribe() passes).
  Threads threads = 0;
  Dense* dense = nullptr;  // where the projections and the MLP run (dense.hpp); nullptr: default_dense()
};

// Cache held by one policy (or summed over the layers): what the CLI reports.
struct CacheUse {
  std::size_t bytes_per_token = 0;  // cache cost of one token (self) or audio frame (cross)
  std::size_t tokens = 0;           // tokens (frames) of the open sequences (windows), each sequence's counted
  std::size_t bytes_held = 0;       // bytes holding them; rows that several sequences share count once
  // What the open sequences would hold if none shared anything: self, every beam its own copy
  // of every row (as contiguous layouts keep them); cross, every beam its own copy of its
  // window's cache. bytes_if_copied - bytes_held is what sharing saves.
  std::size_t bytes_if_copied = 0;
  std::size_t bytes_allocated = 0;  // bytes reserved by the cache stores
};

template <class S>
concept SelfAttentionPolicy =
    std::constructible_from<S, const DecoderBlock&, const WhisperDims&, const DecoderConfig&, int> &&
    requires(S s, const S cs, int seq, std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
      { S::name() } -> std::convertible_to<std::string>;
      { s.open_sequence() } -> std::same_as<int>;
      s.close_sequence(seq);
      { s.fork_sequence(seq) } -> std::same_as<int>;
      s.prefill(seqs, x, out);
      s.decode(seqs, x, out);
      { cs.cache_use() } -> std::same_as<CacheUse>;
      { cs.note() } -> std::convertible_to<std::string>;
    };

// A projection of a self-attention layer: the model's own linear layer, in the precision it
// ships in, borrowed where a policy uses it as it is (the MHA projections, W_o of most kinds), so
// that the weights are not held twice (the model outlives every decoder built on it, which keeps
// a pointer to it anyway), or one a conversion made, owned.
using LayerLinear = std::shared_ptr<const StoredLinear>;
inline LayerLinear borrowed(const StoredLinear& l) { return LayerLinear(LayerLinear(), &l); }  // aliasing constructor: owns nothing
inline LayerLinear owned(StoredLinear l) { return std::make_shared<const StoredLinear>(std::move(l)); }

// One layer's self-attention as a polyattn Variant, produced by a Kind's convert().
template <class Variant>
struct SelfLayerWeights {
  AttentionShape shape;
  // x -> [q | part 0 | part 1 ...] in one GEMM: (q_width + sum(parts), d). Null for a variant
  // that queries and caches x itself (XCache): then q_width is 0 and the one part is x.
  LayerLinear in;
  Eigen::Index q_width = 0;
  std::vector<Eigen::Index> parts;  // widths of the cached parts, in Variant::Rows order
  typename Variant::Params params;
  LayerLinear out;   // (d, output width): W_o with any bias the conversion folded into it
  std::string note;  // what the conversion measured
};

inline AttentionShape self_attention_shape(const WhisperDims& d) {
  return {.n_heads = d.n_text_head, .head_dim = d.n_text_state / d.n_text_head, .model_dim = d.n_text_state};
}

// The pretrained layer: [q | k | v] from the fused projection.
inline SelfLayerWeights<Mha> mha_self_layer(const DecoderBlock& b, const WhisperDims& d) {
  SelfLayerWeights<Mha> w;
  w.shape = self_attention_shape(d);
  w.in = borrowed(b.self_qkv);
  w.q_width = d.n_text_state;
  w.parts = {d.n_text_state, d.n_text_state};
  w.out = borrowed(b.self_out);
  return w;
}

namespace detail {

// n rows of `cols` floats, `stride` floats apart: in a position-major (n * B, w) buffer,
// sequence i's chunk starts at row i and has stride B * w.
inline auto strided_rows(const float* data, Eigen::Index n, Eigen::Index cols, Eigen::Index stride) {
  return Eigen::Map<const RowMatrixXf, 0, Eigen::OuterStride<>>(data, n, cols, Eigen::OuterStride<>(stride));
}
inline auto strided_rows(float* data, Eigen::Index n, Eigen::Index cols, Eigen::Index stride) {
  return Eigen::Map<RowMatrixXf, 0, Eigen::OuterStride<>>(data, n, cols, Eigen::OuterStride<>(stride));
}

// Variant::Rows from its N parts (an aggregate of ConstMatrixRef: {k, v}, {k}, {x}, {latent, key part}).
template <class Variant, std::size_t N, class Part>
typename Variant::Rows make_rows(Part&& part) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) { return typename Variant::Rows{part(I)...}; }(std::make_index_sequence<N>{});
}

}  // namespace detail

// One decoder layer's self-attention through Variant, for a batch of sequences.
template <class Variant, std::size_t Parts, class Layout, class Executor>
class VariantSelfLayer {
 public:
  using attention_type = Attention<Variant, Layout, Executor, float>;

  VariantSelfLayer(SelfLayerWeights<Variant> w, const WhisperDims& d, const DecoderConfig& cfg)
      : w_(check(std::move(w))),
        attn_(w_.shape, {.max_sequences = cfg.max_sequences, .capacity = d.n_text_ctx}, w_.params, cfg.threads),
        dense_(cfg.dense ? cfg.dense : &default_dense()) {
    for (Eigen::Index p : w_.parts) width_ += p;
    width_ += w_.q_width;
  }

  int open_sequence() { return attn_.open_sequence(); }
  void close_sequence(int seq) { attn_.close_sequence(seq); }
  int fork_sequence(int seq) { return attn_.fork(seq); }

  void prefill(std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
    const auto B = static_cast<Eigen::Index>(seqs.size());
    const Eigen::Index n = x.rows() / B, ow = Variant::output_width(w_.shape);
    const ProjectedRows rows = project(x);
    att_.resize(x.rows(), ow);
    for (Eigen::Index i = 0; i < B; ++i) {
      const float* row = rows.data + i * rows.stride;  // token 0 of sequence i; its next token is B rows down
      const auto q = detail::strided_rows(row, n, query_width(), B * rows.stride);
      attn_.prefill(seqs[static_cast<std::size_t>(i)], q,
                    detail::make_rows<Variant, Parts>([&](std::size_t p) {
                      return detail::strided_rows(row + part_offset(p), n, w_.parts[p], B * rows.stride);
                    }),
                    Mask::causal, detail::strided_rows(att_.data() + i * ow, n, ow, B * ow));
    }
    dense_->linear_into(att_, *w_.out, out);
  }

  void decode(std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
    const ProjectedRows rows = project(x);
    att_.resize(x.rows(), Variant::output_width(w_.shape));
    attn_.decode(seqs, detail::strided_rows(rows.data, x.rows(), query_width(), rows.stride),
                 detail::make_rows<Variant, Parts>(
                     [&](std::size_t p) { return detail::strided_rows(rows.data + part_offset(p), x.rows(), w_.parts[p], rows.stride); }),
                 att_);
    dense_->linear_into(att_, *w_.out, out);
  }

  CacheUse cache_use() const {
    CacheUse u;
    u.bytes_per_token = attention_type::cache_bytes_per_token(w_.shape);
    for (int s = 0; s < attn_.cache().max_sequences(); ++s)
      if (attn_.cache().is_open(s)) u.tokens += static_cast<std::size_t>(attn_.length(s));
    const CacheMemory m = attn_.cache_memory();
    u.bytes_held = m.held;
    u.bytes_if_copied = m.unshared;
    u.bytes_allocated = m.allocated;
    return u;
  }

  const std::string& note() const { return w_.note; }

 private:
  static SelfLayerWeights<Variant> check(SelfLayerWeights<Variant> w) {
    require<ShapeError>(w.parts.size() == Parts, Variant::name(), ": ", w.parts.size(), " cached parts, expected ", Parts);
    require<ShapeError>(w.out != nullptr, Variant::name(), ": no output projection");
    const bool projects = w.in != nullptr;
    require<ShapeError>(projects || (w.q_width == 0 && Parts == 1), Variant::name(),
                        ": without an input projection the query and the one cached part are x itself");
    return w;
  }

  bool projects() const { return w_.in != nullptr; }
  Eigen::Index query_width() const { return projects() ? w_.q_width : w_.parts[0]; }
  Eigen::Index part_offset(std::size_t p) const {
    Eigen::Index offset = w_.q_width;
    for (std::size_t i = 0; i < p; ++i) offset += w_.parts[i];
    return offset;
  }

  // The projected rows [q | parts] (or x itself). A named struct, not a structured binding: the
  // lambdas above capture it, which clang before 16 refuses for structured bindings.
  struct ProjectedRows {
    const float* data;
    Eigen::Index stride;  // floats from one row to the next
  };
  ProjectedRows project(ConstMatrixRef x) {
    if (!projects()) return {x.data(), x.outerStride()};
    buf_.resize(x.rows(), width_);
    dense_->linear_into(x, *w_.in, buf_);
    return {buf_.data(), width_};
  }

  SelfLayerWeights<Variant> w_;
  attention_type attn_;
  Dense* dense_;
  Eigen::Index width_ = 0;
  RowMatrixXf buf_, att_;  // scratch: (rows, q | parts), (rows, output width)
};

// The --self policy "<kind>/<layout>": every layer converted by Kind (self_variants.hpp). A Kind
// whose conversion can refuse a layer (slim attention on an ill-conditioned W_k) may fall back to
// the pretrained MHA for that layer alone; the layer's note says so, and its cache is MHA's.
template <class Kind, class Layout, class Executor = exec::CpuSimd>
class SelfAttention {
  using Primary = VariantSelfLayer<typename Kind::variant, Kind::cached_parts, Layout, Executor>;
  using Fallback = VariantSelfLayer<Mha, 2, Layout, Executor>;

 public:
  using kind = Kind;

  static std::string name() { return Kind::name() + "/" + Layout::name(); }

  SelfAttention(const DecoderBlock& b, const WhisperDims& d, const DecoderConfig& cfg, int layer)
      : layer_(make_layer(b, d, cfg, layer)) {}

  int open_sequence() {
    return std::visit([](auto& l) { return l.open_sequence(); }, layer_);
  }
  void close_sequence(int seq) {
    std::visit([&](auto& l) { l.close_sequence(seq); }, layer_);
  }
  int fork_sequence(int seq) {
    return std::visit([&](auto& l) { return l.fork_sequence(seq); }, layer_);
  }
  void prefill(std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
    std::visit([&](auto& l) { l.prefill(seqs, x, out); }, layer_);
  }
  void decode(std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
    std::visit([&](auto& l) { l.decode(seqs, x, out); }, layer_);
  }
  CacheUse cache_use() const {
    return std::visit([](const auto& l) { return l.cache_use(); }, layer_);
  }
  std::string note() const {
    return std::visit([](const auto& l) { return l.note(); }, layer_);
  }

 private:
  using Layer = std::variant<Primary, Fallback>;

  static Layer make_layer(const DecoderBlock& b, const WhisperDims& d, const DecoderConfig& cfg, int layer) {
    if constexpr (Kind::mha_fallback) {
      try {
        return Layer(std::in_place_index<0>, Kind::convert(b, d, layer), d, cfg);
      } catch (const ConversionError& e) {
        SelfLayerWeights<Mha> mha = mha_self_layer(b, d);
        mha.note = "layer " + std::to_string(layer) + ": kept MHA (" + Kind::name() + " refused: " + e.what() + ")";
        return Layer(std::in_place_index<1>, std::move(mha), d, cfg);
      }
    } else {
      return Layer(std::in_place_index<0>, Kind::convert(b, d, layer), d, cfg);
    }
  }

  Layer layer_;
};

}  // namespace polyattn::whisper
