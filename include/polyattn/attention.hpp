// Attention<Variant, Layout, Executor, T, KeyMaskT>: a layer's attention with its own cache.
//
//   append(seq, rows)              write rows (K/V, or what the variant caches) to the cache
//   attend(seqs, q, out)           one query per sequence over everything cached (cross-attention)
//   decode(seqs, q, rows, out)     append one token per sequence, then attend (self-attention)
//   prefill(seq, q, rows, mask, out)  append a chunk, then attend it: causal (decoder) or full
//
// q is (rows, Variant::query_width(shape)); out is (rows, Variant::output_width(shape)), the
// concatenated heads before the output projection. Every call checks all of its inputs, and the
// room for everything it appends (capacity and page pool, for all of a batch's sequences
// together), before it writes anything, so a failed call leaves the cache as it was. A call
// with no rows (an empty batch, a prefill or append of no tokens) does nothing.
//
// Positions and lengths count tokens. For a variant that merges tokens into shared cache rows
// (Variant::tokens_per_row > 1, e.g. Mtla) the store counts rows, ceil(tokens / tokens_per_row),
// and CacheConfig::capacity is in rows; see VariantBase.
//
// KeyMaskT (core/key_mask.hpp) narrows what every query row sees, in decode and prefill alike, inside
// the executors' tile loops: PrefixMask (the default) leaves each row every token its prefix gives
// it (all cached tokens; causal or full in prefill), SlidingWindow<W> (core/sliding_window.hpp)
// the last W of them. A mask counts cache rows, which are tokens unless the variant merges them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/core/attend.hpp"
#include "polyattn/core/attend_with_hooks.hpp"
#include "polyattn/core/cache_element.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/mask.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/row_codec.hpp"
#include "polyattn/core/shape.hpp"
#include "polyattn/core/threads.hpp"
#include "polyattn/variants/variant.hpp"

namespace polyattn {

template <class Variant, class Layout, class Executor, class T = float, KeyMask KeyMaskT = PrefixMask>
class Attention {
  static_assert(AttentionVariant<Variant>,
                "polyattn: the Variant argument of Attention does not model AttentionVariant (see variants/variant.hpp)");
  static_assert(CacheElement<T>,
                "polyattn: cache element type T must be float, double, Eigen::half, Eigen::bfloat16 or std::int8_t "
                "(core/cache_element.hpp)");
  static_assert(Variant::tokens_per_row >= 1, "polyattn: Variant::tokens_per_row must be >= 1");
  static constexpr bool merges_tokens = Variant::tokens_per_row > 1;
  static_assert(!is_scaled_int8<T> || requires(AttentionShape s) { Variant::cache_scales_per_token(s); },
                "polyattn: int8 caches are for the variants that say where a row's scales go "
                "(cache_scales_per_token): Mha, Gqa, Mqa, SlimK2 and XCache");

 public:
  using variant_type = Variant;
  using layout_type = Layout;
  using executor_type = Executor;
  using value_type = T;
  using mask_type = KeyMaskT;
  using Store = CacheStore<Layout, T>;
  using Params = typename Variant::Params;
  using Rows = typename Variant::Rows;

  /// Bytes of cache one token costs for this variant and element type, at compile time (for a
  /// variant that merges tokens: per row / tokens_per_row, as the variant rounds it).
  /// int8 caches: the codes and their float scales.
  static constexpr std::size_t cache_bytes_per_token(AttentionShape shape) {
    if constexpr (is_scaled_int8<T>)
      return Variant::cache_elements_per_token(shape) + sizeof(float) * Variant::cache_scales_per_token(shape);
    else
      return Variant::cache_elements_per_token(shape) * sizeof(T);
  }
  /// Bytes of one cache row (= cache_bytes_per_token unless the variant merges tokens).
  static constexpr std::size_t cache_bytes_per_row(AttentionShape shape) {
    if constexpr (is_scaled_int8<T>)
      return cache_bytes_per_token(shape);  // no int8 variant merges tokens
    else
      return cache_elements_per_row<Variant>(shape) * sizeof(T);
  }
  /// Cache rows that hold `tokens` tokens.
  static constexpr int cache_rows_for(int tokens) { return (tokens + Variant::tokens_per_row - 1) / Variant::tokens_per_row; }

  static std::string name() { return Variant::name() + "/" + Layout::name() + "/" + Executor::name(); }

  /// `threads` is passed to the executor: a count (0 = usable_cores(): the CPUs it may run on), or
  /// a team the program lends (core/threads.hpp).
  Attention(AttentionShape shape, CacheConfig config, Params params = {}, Threads threads = {})
      : shape_(validated(shape, params)),
        params_(std::move(params)),
        spec_(spec_for(shape_, params_)),
        store_(stored_tensors(shape_, params_), config),
        executor_(std::move(threads)),
        tokens_(merges_tokens ? std::size_t(config.max_sequences) : 0, 0),
        open_rows_(std::size_t(config.max_sequences) * std::size_t(Variant::open_row_width), 0.0) {}

  const AttentionShape& shape() const { return shape_; }
  const Params& params() const { return params_; }
  const AttendSpec& attend_spec() const { return spec_; }
  const Store& cache() const { return store_; }
  Store& cache() { return store_; }
  Executor& executor() { return executor_; }

  int open_sequence() {
    const int seq = store_.open();
    if constexpr (merges_tokens) tokens_[std::size_t(seq)] = 0;
    return seq;
  }
  void close_sequence(int seq) { store_.close(seq); }
  /// Opens a sequence that holds `parent`'s tokens and goes on independently of it (a beam).
  /// Paged<P> shares the parent's full pages and copies only its partly filled last page (and,
  /// for a variant that merges tokens, the page of a row still being merged); the contiguous
  /// layouts copy the rows. Throws CapacityError with no free slot or page, changing nothing.
  int fork(int parent) {
    const int tokens = length(parent);  // throws SequenceError for a sequence that is not open
    const int child = store_.fork(parent, last_row_open(parent));
    if constexpr (merges_tokens) tokens_[std::size_t(child)] = tokens;
    std::copy_n(open_rows_.begin() + std::ptrdiff_t(std::size_t(parent) * Variant::open_row_width), Variant::open_row_width,
                open_rows_.begin() + std::ptrdiff_t(std::size_t(child) * Variant::open_row_width));
    return child;
  }

  /// One beam step: `beams` are distinct open sequences, and new beam i continues
  /// beams[parents[i]]. A beam chosen once keeps its sequence, one chosen k times is forked k - 1
  /// times, one not chosen is closed. Returns the new beams' sequences, in the order of `parents`.
  /// Every slot and page it needs is checked first, counting what the closed beams give back, so
  /// a step that cannot be made throws and changes nothing.
  std::vector<int> reorder(std::span<const int> beams, std::span<const int> parents) {
    for (int seq : beams) store_.length(seq);  // throws SequenceError for a sequence that is not open
    require_distinct(beams, "reorder");
    std::vector<int> uses(beams.size(), 0);
    for (int p : parents) {
      require<ShapeError>(p >= 0 && std::size_t(p) < beams.size(), "reorder: parent index ", p, " is not one of the ",
                          beams.size(), " beams");
      ++uses[std::size_t(p)];
    }
    std::vector<int> dropped;
    int forks = 0;
    for (std::size_t i = 0; i < beams.size(); ++i) {
      if (uses[i] == 0) dropped.push_back(beams[i]);
      forks += std::max(0, uses[i] - 1);
    }
    require<CapacityError>(forks <= store_.free_slots() + int(dropped.size()), "reorder: ", forks,
                           " forks need as many sequence slots, ", store_.free_slots(), " are free and ", dropped.size(),
                           " beams are dropped; raise CacheConfig.max_sequences");
    if constexpr (requires { store_.free_pages_after_closing(dropped); }) {
      int pages = 0;
      for (std::size_t i = 0; i < beams.size(); ++i)
        if (uses[i] > 1 && store_.fork_takes_page(beams[i], last_row_open(beams[i]))) pages += uses[i] - 1;
      const int free = store_.free_pages_after_closing(dropped);
      require<CapacityError>(pages <= free, "reorder: the forks need ", pages, " page(s) for their partly filled last pages, ",
                             free, " are free once the dropped beams are closed");
    }
    for (int seq : dropped) close_sequence(seq);
    std::vector<int> next;
    std::vector<bool> kept(beams.size(), false);
    for (int p : parents) {
      const auto i = std::size_t(p);
      next.push_back(kept[i] ? fork(beams[i]) : beams[i]);
      kept[i] = true;
    }
    return next;
  }
  /// Tokens held by `seq`.
  int length(int seq) const {
    const int rows = store_.length(seq);  // throws SequenceError for a sequence that is not open
    if constexpr (merges_tokens)
      return tokens_[std::size_t(seq)];
    else
      return rows;
  }
  /// Cache rows held by `seq` (= length unless the variant merges tokens).
  int cache_rows(int seq) const { return store_.length(seq); }
  /// Cache rows per sequence.
  int capacity() const { return store_.capacity(); }
  std::size_t cache_bytes_allocated() const { return store_.bytes_allocated(); }
  /// Allocated, held and shared bytes of the cache (CacheMemory): what paging and forks save.
  CacheMemory cache_memory() const {
    return {store_.bytes_allocated(), store_.bytes_held(), store_.bytes_shared(), store_.bytes_if_unshared()};
  }
  /// Bytes of cache holding tokens of `seq` (what decode reads per step for it).
  std::size_t cache_bytes_used(int seq) const { return std::size_t(cache_rows(seq)) * cache_bytes_per_row(shape_); }

  void append(int seq, const Rows& rows) {
    Variant::check_rows(shape_, params_, rows);
    const int n = Variant::row_count(rows);
    check_room(std::span(&seq, 1), n);
    write(seq, rows, 0, n);
  }

  void attend(std::span<const int> seqs, ConstMatrixRef q, MatrixRef out) {
    check_batch(seqs, q, out, "attend");
    for (int seq : seqs)
      require<ShapeError>(store_.length(seq) > 0, "attend: sequence ", seq, " has no cached tokens to attend to");
    jobs_.clear();
    for (std::size_t i = 0; i < seqs.size(); ++i) jobs_.push_back({seqs[i], store_.length(seqs[i]), nullptr, nullptr});
    run(q, out);
  }

  void decode(std::span<const int> seqs, ConstMatrixRef q, const Rows& rows, MatrixRef out) {
    check_batch(seqs, q, out, "decode");
    Variant::check_rows(shape_, params_, rows);
    require<ShapeError>(Variant::row_count(rows) == int(seqs.size()), "decode: ", seqs.size(), " sequences but ",
                        Variant::row_count(rows), " cache rows (one new token per sequence)");
    check_room(seqs, 1);
    jobs_.clear();
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      write(seqs[i], rows, int(i), 1);
      jobs_.push_back({seqs[i], store_.length(seqs[i]), nullptr, nullptr});
    }
    run(q, out);
  }

  void prefill(int seq, ConstMatrixRef q, const Rows& rows, Mask mask, MatrixRef out) {
    const int n = int(q.rows());
    check_width(q, Variant::query_width(shape_), "prefill: q");
    check_width(out, Variant::output_width(shape_), "prefill: out");
    require<ShapeError>(out.rows() == n, "prefill: out has ", out.rows(), " rows, expected ", n, " (one per query)");
    Variant::check_rows(shape_, params_, rows);
    require<ShapeError>(Variant::row_count(rows) == n, "prefill: q has ", n, " rows but there are ", Variant::row_count(rows),
                        " cache rows");
    check_room(std::span(&seq, 1), n);
    if constexpr (merges_tokens) {
      if (mask == Mask::causal) {  // token by token: query i sees the row its token just updated
        for (int i = 0; i < n; ++i) {
          write(seq, rows, i, 1);
          jobs_.assign(1, {seq, store_.length(seq), nullptr, nullptr});
          run(q.middleRows(i, 1), out.middleRows(i, 1));
        }
        return;
      }
    }
    const int first = write(seq, rows, 0, n);
    jobs_.clear();
    for (int i = 0; i < n; ++i) jobs_.push_back({seq, mask == Mask::causal ? first + i + 1 : store_.length(seq), nullptr, nullptr});
    run(q, out);
  }

 private:
  static AttentionShape validated(AttentionShape shape, const Params& params) {
    Variant::validate(shape, params);
    return shape;
  }

  /// The variant's spec; a variant that merges later tokens into its last row rewrites that row
  /// after attends have read it, which an executor mirroring the cache must know.
  static AttendSpec spec_for(const AttentionShape& shape, const Params& params) {
    AttendSpec spec = Variant::attend_spec(shape, params);
    spec.rewrites_last_row = merges_tokens;
    if constexpr (is_scaled_int8<T>) {
      const std::vector<TensorSpec> tensors = Variant::cache_tensors(shape, params);
      const auto layout = [&](int tensor) {
        const TensorSpec& t = tensors[std::size_t(tensor)];
        return int8_row(t.dim, t.segment);
      };
      spec.key_scales = layout(spec.key_tensor);
      spec.value_scales = layout(spec.value_tensor);
      // What the executors rely on: each query head's key lies in one segment, values span whole rows.
      const int seg = spec.key_scales.segment;
      require<ShapeError>(spec.key_offset == 0 && spec.value_offset == 0 && spec.key_dim <= seg &&
                              spec.key_group_stride % seg == 0 && spec.value_dim == spec.value_scales.codes,
                          Variant::name(), ": an int8 cache needs each query head's key inside one scale segment of ", seg,
                          " and whole value rows");
    }
    return spec;
  }

  /// The tensors as the store holds them: an int8 row is its codes and then its scales.
  static std::vector<TensorSpec> stored_tensors(const AttentionShape& shape, const Params& params) {
    std::vector<TensorSpec> tensors = Variant::cache_tensors(shape, params);
    if constexpr (is_scaled_int8<T>)
      for (TensorSpec& t : tensors) t.dim = int8_row(t.dim, t.segment).stored_elements();
    return tensors;
  }

  /// Cache rows that `n` more tokens of `seq` add (0 or more; a variant that merges tokens
  /// fills its last row first). In 64 bits: length + n may pass INT_MAX before it is refused.
  std::int64_t new_rows(int seq, int n) const {
    const std::int64_t rows = (std::int64_t(length(seq)) + n + Variant::tokens_per_row - 1) / Variant::tokens_per_row;
    return rows - store_.length(seq);
  }

  /// Checks that `n` more tokens fit in each of `seqs` (distinct: check_batch refuses repeats),
  /// all together, before anything is written.
  void check_room(std::span<const int> seqs, int n) {
    require<ShapeError>(n >= 0, "cannot append a negative number of tokens (", n, ")");
    requests_.clear();
    for (int seq : seqs) {
      const std::int64_t rows = new_rows(seq, n);
      if constexpr (merges_tokens)
        require<CapacityError>(rows <= store_.capacity() - store_.length(seq), "sequence ", seq, " holds ", length(seq),
                               " tokens in ", store_.length(seq), " of ", store_.capacity(), " cache rows (",
                               Variant::tokens_per_row, " tokens per row); appending ", n, " tokens would overflow its capacity");
      requests_.push_back({seq, int(rows)});
    }
    store_.check_room(requests_);
  }

  /// Writes rows [first_row, first_row + n) as the next tokens of `seq`; returns the position of
  /// the first one.
  int write(int seq, const Rows& rows, int first_row, int n) {
    const int pos = length(seq);
    store_.grow(seq, int(new_rows(seq, n)));
    if constexpr (merges_tokens) tokens_[std::size_t(seq)] += n;
    if constexpr (Variant::open_row_width > 0)
      Variant::write_rows(store_, seq, pos, shape_, params_, rows, first_row, n,
                          open_rows_.data() + std::size_t(seq) * std::size_t(Variant::open_row_width));
    else
      Variant::write_rows(store_, seq, pos, shape_, params_, rows, first_row, n);
    return pos;
  }

  template <class M>
  static void check_width(const M& m, int expected, const char* what) {
    require<ShapeError>(m.cols() == expected, what, " has ", m.cols(), " columns, expected ", expected);
  }

  /// Whether the last cache row of `seq` will still be rewritten (a variant that merges tokens,
  /// with a row not yet full): a fork must not share it.
  bool last_row_open(int seq) const { return merges_tokens && length(seq) % Variant::tokens_per_row != 0; }

  static void require_distinct(std::span<const int> seqs, const char* what) {
    std::vector<int> sorted(seqs.begin(), seqs.end());
    std::sort(sorted.begin(), sorted.end());
    const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    require<ShapeError>(dup == sorted.end(), what, ": sequence ", dup == sorted.end() ? -1 : *dup,
                        " appears twice in one batch");
  }

  void check_batch(std::span<const int> seqs, ConstMatrixRef q, MatrixRef out, const char* what) const {
    const auto b = std::ptrdiff_t(seqs.size());
    require<ShapeError>(q.rows() == b, what, ": ", b, " sequences but q has ", q.rows(), " rows");
    require<ShapeError>(out.rows() == b, what, ": ", b, " sequences but out has ", out.rows(), " rows");
    check_width(q, Variant::query_width(shape_), "q");
    check_width(out, Variant::output_width(shape_), "out");
    for (int seq : seqs) store_.length(seq);  // throws SequenceError for a sequence that is not open
    require_distinct(seqs, what);
  }

  /// Runs the executor for jobs_ (seq and visible set) through the variant's hooks.
  void run(ConstMatrixRef q, MatrixRef out) {
    attend_with_hooks<Variant, KeyMaskT>(shape_, params_, spec_, std::as_const(store_), executor_, std::span<QueryJob>(jobs_), q, out,
                               scratch_);
  }

  AttentionShape shape_;
  Params params_;
  AttendSpec spec_;
  Store store_;
  Executor executor_;
  std::vector<int> tokens_;  // per sequence slot, when the variant merges tokens
  std::vector<double> open_rows_;  // per sequence slot: Variant::open_row_width doubles (the open row's sum)
  std::vector<QueryJob> jobs_;
  std::vector<RowRequest> requests_;  // check_room's, kept to spare an allocation per decode
  AttendScratch<Variant> scratch_;  // for variants with query/output transforms or derived rows
};

}  // namespace polyattn
