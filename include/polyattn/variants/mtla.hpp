// Mtla<Rank, Stride, RopeDim>: multi-head temporal latent attention (Deng & Woodland, MTLA).
// MLA in its DeepSeek form (latent of Rank + one decoupled RoPE key of RopeDim, absorbed decode,
// see latent_absorption.hpp) whose cache is also compressed in time: Stride consecutive tokens
// share one cache row ("slot").
//
// Token i (0-based) with latent c_i = LayerNorm(x_i W_r) (LayerNorm over Rank, affine) and slot
// j = i / Stride:
//   w_i = sigmoid( <Lin_p(PE(j)), Lin_c(c_i)> )       Lin_*: Rank -> Rank/4 with bias, PE
//                                                      sinusoidal of width Rank (interleaved)
//   i % Stride == 0: open slot j:   c^_j  = w_i c_i
//   otherwise:       accumulate:    c^_j += w_i c_i
//   the slot's RoPE key is always the newest token's: k^R_j = k^R_i
// A query at token i sees every full slot before j and slot j as it is after token i (partly
// merged unless i closes it). The parallel form (training/prefill; `parallel_keys` and
// mtla_parallel.hpp) is C' = (W o M) C with W = sigmoid(Lin_p(PE_rep) Lin_c(C)ᵀ) (T x T) and the
// chunk mask M, then attention over T keys under the stride-aware causal mask (key n visible
// from query m iff n == m, or n < m and (n + 1) % Stride == 0). The two agree for every Stride,
// 1 included (the reference code tests `T % s != 1` with a 1-based T to decide "accumulate",
// which never opens a slot when s = 1).
//
// Reference-code names: its HyperNetwork applies `fc_c` to PE and `fc_p` to the latent, the
// other way round from the letters here; pos_weight = fc_c.weightᵀ, latent_weight = fc_p.weightᵀ.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "polyattn/core/error.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/variants/latent_absorption.hpp"
#include "polyattn/variants/variant.hpp"

namespace polyattn {

/// MTLA's stride-aware causal mask over the keys of its parallel form (key n: token n's slot as
/// it stands after token n), as a key mask (core/key_mask.hpp): the row of token m = visible - 1
/// sees key m and every key n < m that closes a slot, (n + 1) % Stride == 0.
template <int Stride>
struct MtlaStrideMask {
  static constexpr bool drops_keys = Stride > 1;
  POLYATTN_HOST_DEVICE static constexpr KeyRange range(const QueryJob& job) { return {0, job.visible}; }
  POLYATTN_HOST_DEVICE static constexpr bool keeps(const QueryJob& job, int key) {
    return key == job.visible - 1 || (key + 1) % Stride == 0;
  }
};

template <int Rank, int Stride, int RopeDim>
struct Mtla : VariantBase {
  static_assert(Stride >= 1, "polyattn: Mtla<Rank, Stride, RopeDim> needs Stride >= 1");
  static_assert(Rank % 4 == 0, "polyattn: Mtla's hyper-network has Rank / 4 hidden units: Rank must be a multiple of 4");
  using Absorb = detail::LatentAbsorption<Rank, RopeDim, MlaKeyPart::decoupled_rope>;
  static constexpr int rank = Rank;
  static constexpr int stride = Stride;
  static constexpr int rope_dim = RopeDim;
  static constexpr int hyper_dim = Rank / 4;
  static constexpr int tokens_per_row = Stride;
  static constexpr int open_row_width = Rank;
  static constexpr bool transforms_queries = true;
  static constexpr bool transforms_outputs = true;
  using StrideMask = MtlaStrideMask<Stride>;

  /// Weights in the x·W convention (a torch Linear weight is the transpose).
  struct Params {
    RowMatrixXf w_uk;  ///< (Rank, n_heads * head_dim): head h's key (no RoPE part) = c w_uk[:, h*head_dim, +head_dim)
    RowMatrixXf w_uv;  ///< (Rank, n_heads * head_dim): head h's value
    float scale = 0;   ///< softmax scale; 0 = 1/sqrt(head_dim + RopeDim), the pre-absorption q.k width
    Eigen::RowVectorXf ln_gamma, ln_beta;  ///< (Rank): LayerNorm of the latent
    float ln_eps = 1e-5f;
    RowMatrixXf pos_weight;                ///< (Rank, Rank/4): Lin_p, applied to PE(slot)
    Eigen::RowVectorXf pos_bias;           ///< (Rank/4)
    RowMatrixXf latent_weight;             ///< (Rank, Rank/4): Lin_c, applied to the normalised latent
    Eigen::RowVectorXf latent_bias;        ///< (Rank/4)
  };
  /// latent (tokens, Rank) = x W_r before LayerNorm; rope_key (tokens, RopeDim) with RoPE applied
  /// at the token's own position.
  struct Rows {
    ConstMatrixRef latent;
    ConstMatrixRef rope_key;
  };

  static std::string name() {
    return "mtla_r" + std::to_string(Rank) + "_s" + std::to_string(Stride) + "_rope" + std::to_string(RopeDim);
  }

  static constexpr int query_head_dim(AttentionShape s) { return Absorb::query_head_dim(s); }

  /// One slot: [c^ (Rank) | k^R (RopeDim)].
  static constexpr std::size_t cache_elements_per_row(AttentionShape) { return std::size_t(Rank + RopeDim); }
  /// Average per token, rounded up (exact when Stride divides Rank + RopeDim).
  static constexpr std::size_t cache_elements_per_token(AttentionShape s) {
    return (cache_elements_per_row(s) + Stride - 1) / Stride;
  }

  static std::vector<TensorSpec> cache_tensors(AttentionShape, const Params&) { return {TensorSpec{1, Rank + RopeDim}}; }

  static void validate(AttentionShape s, const Params& p) {
    Absorb::validate_shape(name(), s);
    Absorb::validate_weights(name(), s, p.w_uk, p.w_uv, Eigen::RowVectorXf(), p.scale);
    const auto vec = [&](const Eigen::RowVectorXf& v, int n, const char* what) {
      require<ShapeError>(v.size() == n, name(), ": ", what, " has ", v.size(), " entries, expected ", n);
    };
    const auto mat = [&](const RowMatrixXf& m, const char* what) {
      require<ShapeError>(m.rows() == Rank && m.cols() == hyper_dim, name(), ": ", what, " is (", m.rows(), ", ", m.cols(),
                          "), expected (Rank, Rank / 4) = (", Rank, ", ", hyper_dim, ")");
    };
    vec(p.ln_gamma, Rank, "ln_gamma");
    vec(p.ln_beta, Rank, "ln_beta");
    require<ShapeError>(std::isfinite(p.ln_eps) && p.ln_eps > 0, name(), ": ln_eps must be > 0, got ", p.ln_eps);
    mat(p.pos_weight, "pos_weight");
    vec(p.pos_bias, hyper_dim, "pos_bias");
    mat(p.latent_weight, "latent_weight");
    vec(p.latent_bias, hyper_dim, "latent_bias");
  }

  static AttendSpec attend_spec(AttentionShape s, const Params& p) { return Absorb::attend_spec(s, p.scale); }

  static constexpr int query_width(AttentionShape s) { return s.n_heads * query_head_dim(s); }
  static constexpr int output_width(AttentionShape s) { return s.n_heads * s.head_dim; }

  static int row_count(const Rows& r) { return int(r.latent.rows()); }

  static void check_rows(AttentionShape, const Params&, const Rows& r) {
    require<ShapeError>(r.latent.cols() == Rank, name(), ": latent has ", r.latent.cols(), " columns, expected Rank = ", Rank);
    require<ShapeError>(r.rope_key.cols() == RopeDim, name(), ": rope_key has ", r.rope_key.cols(), " columns, expected RopeDim = ",
                        RopeDim);
    require<ShapeError>(r.rope_key.rows() == r.latent.rows(), name(), ": latent has ", r.latent.rows(), " rows but rope_key has ",
                        r.rope_key.rows());
  }

  // ---- the pieces of the merge, in any scalar type ------------------------------------------

  template <class Scalar>
  using Vec = Eigen::Matrix<Scalar, 1, Eigen::Dynamic>;

  /// LayerNorm over the Rank entries of one latent row (biased variance, as torch).
  template <class Scalar>
  static Vec<Scalar> layer_norm(const Params& p, const Eigen::Ref<const Eigen::RowVectorXf>& c) {
    const Vec<Scalar> x = c.template cast<Scalar>();
    const Scalar mean = x.mean();
    const Scalar var = (x.array() - mean).square().mean();
    const Scalar inv = Scalar(1) / std::sqrt(var + Scalar(p.ln_eps));
    return ((x.array() - mean) * inv * p.ln_gamma.template cast<Scalar>().array() + p.ln_beta.template cast<Scalar>().array())
        .matrix();
  }

  /// PE(j), width Rank: [2k] = sin(j / 10000^(2k/Rank)), [2k+1] = cos(same).
  template <class Scalar>
  static Vec<Scalar> positional_encoding(int slot) {
    Vec<Scalar> pe(Rank);
    for (int k = 0; k < Rank / 2; ++k) {
      const Scalar angle = Scalar(slot) * std::exp(Scalar(2 * k) * (-std::log(Scalar(10000)) / Scalar(Rank)));
      pe[2 * k] = std::sin(angle);
      pe[2 * k + 1] = std::cos(angle);
    }
    return pe;
  }

  /// w_i for a normalised latent merged into slot `slot`.
  template <class Scalar>
  static Scalar merge_weight(const Params& p, const Vec<Scalar>& c_norm, int slot) {
    const Vec<Scalar> hp = positional_encoding<Scalar>(slot) * p.pos_weight.template cast<Scalar>() + p.pos_bias.template cast<Scalar>();
    const Vec<Scalar> hc = c_norm * p.latent_weight.template cast<Scalar>() + p.latent_bias.template cast<Scalar>();
    return Scalar(1) / (Scalar(1) + std::exp(-hp.dot(hc)));
  }

  // ---- the merge, shared by the cache update and the parallel form ----------------------------

  /// Merges tokens pos, pos + 1, ... (latent rows [first_row, first_row + n)) into their slots,
  /// calling emit(i, slot) once token pos + i is in: `open_row` (Rank doubles) then holds its
  /// slot's unrounded sum, c^_slot as it stands after that token. The hyper-network runs once for
  /// the block (in double): Lin_c over the n latents, Lin_p over the slots touched.
  template <class Emit>
  static void merge_tokens(const Params& p, const Rows& r, int pos, int first_row, int n, double* open_row, Emit&& emit) {
    if (n <= 0) return;
    using Mat = RowMatrix<double>;
    const int first_slot = pos / Stride, slots = (pos + n - 1) / Stride - first_slot + 1;
    Mat c(n, Rank), pe(slots, Rank);
    for (int i = 0; i < n; ++i) c.row(i) = layer_norm<double>(p, r.latent.row(first_row + i));
    for (int j = 0; j < slots; ++j) pe.row(j) = positional_encoding<double>(first_slot + j);
    const Mat hc = (c * p.latent_weight.template cast<double>()).rowwise() + p.latent_bias.template cast<double>();
    const Mat hp = (pe * p.pos_weight.template cast<double>()).rowwise() + p.pos_bias.template cast<double>();
    for (int i = 0; i < n; ++i) {
      const int token = pos + i, slot = token / Stride;
      const double w = 1.0 / (1.0 + std::exp(-hp.row(slot - first_slot).dot(hc.row(i))));
      for (int k = 0; k < Rank; ++k) open_row[k] = token % Stride == 0 ? w * c(i, k) : open_row[k] + w * c(i, k);
      emit(i, slot);
    }
  }

  // ---- incremental cache update --------------------------------------------------------------

  /// Merges tokens pos, pos + 1, ... (rows [first_row, first_row + n)) into their slots; the
  /// slots exist (Attention grew the store to ceil((pos + n) / Stride) rows). `open_row` (Rank
  /// doubles, the sequence's own) holds the unrounded sum of the slot being filled: each merge
  /// adds to it and the row is written from it, rounded to T once.
  template <class Store>
  static void write_rows(Store& store, int seq, int pos, AttentionShape, const Params& p, const Rows& r, int first_row, int n,
                         double* open_row) {
    merge_tokens(p, r, pos, first_row, n, open_row, [&](int i, int slot) {
      auto* row = store.row(0, seq, slot, 0);
      encode_row(row, open_row, Rank);  // the merged row, rounded once from its double sum
      encode_row(row + Rank, r.rope_key.row(first_row + i).data(), RopeDim);
    });
  }

  static void prepare_queries(AttentionShape s, const Params& p, ConstMatrixRef q, RowMatrixXf& absorbed) {
    Absorb::prepare_queries(s, p.w_uk, q, absorbed);
  }
  static void finish_outputs(AttentionShape s, const Params& p, const RowMatrixXf& attended, MatrixRef out) {
    Absorb::finish_outputs(s, p.w_uv, Eigen::RowVectorXf(), attended, out);
  }

  // ---- the parallel (training / prefill) form -------------------------------------------------

  /// The keys of the parallel form, one per token (positions 0..T-1): row m = [c^ of m's slot as
  /// it stands after token m (C' = (W o M) C, merged in double and rounded to float once) | k^R_m],
  /// (T, Rank + RopeDim). Attention over them under StrideMask, with the values their first Rank
  /// columns, is the whole form (mtla_parallel.hpp runs it on an executor). W o M is nonzero only
  /// inside a slot and its row m, column n <= m is w_n (Lin_p sees the slot, which m and n share),
  /// so C' is the running merge of the cache update: O(T Rank), not a T x T product.
  static RowMatrixXf parallel_keys(AttentionShape s, const Params& p, const Rows& r) {
    validate(s, p);
    check_rows(s, p, r);
    const int T = int(r.latent.rows());
    RowMatrixXf keys(T, Rank + RopeDim);
    std::vector<double> open_row(static_cast<std::size_t>(Rank));
    merge_tokens(p, r, 0, 0, T, open_row.data(), [&](int i, int) {
      encode_row(keys.row(i).data(), open_row.data(), Rank);
      keys.row(i).tail(RopeDim) = r.rope_key.row(i);
    });
    return keys;
  }
};

}  // namespace polyattn
