// Paged layout (vLLM / FlashInfer style): a pool of fixed-size pages shared by all sequences;
// each sequence has a page table. Inside a page the layout is (head, token, dim), as in Hnd: a
// head's rows of a page are contiguous, so decode streams them (one page of 16 float rows of 64
// is 4 KiB per head) instead of striding over the other heads. Pages are taken from the pool as
// a sequence grows and returned when it is closed. The pool itself grows on demand: it commits
// pages in chunks (CacheConfig::pool_chunk_pages) up to its limit (CacheConfig::pool_pages), so
// memory follows the pages ever held at once rather than max_sequences * capacity. A tensor's
// pool is one buffer whose capacity is reserved for the limit when the store is made (address
// space only: the memory of a page is touched when its chunk is committed), so committing never
// moves a page.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "polyattn/cache/buffer_size.hpp"
#include "polyattn/cache/cache_line.hpp"
#include "polyattn/cache/huge_pages.hpp"
#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/cache/sequence_table.hpp"
#include "polyattn/cache/tensor_strides.hpp"
#include "polyattn/core/cache_element.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

template <int PageSize>
struct Paged {
  static_assert(PageSize >= 1, "polyattn: Paged<PageSize> needs PageSize >= 1");
  static constexpr int page_size = PageSize;
  static std::string name() { return "paged" + std::to_string(PageSize); }
  static constexpr TensorStrides strides(const TensorSpec& s, int page_tokens) { return head_major_strides(s, page_tokens); }
};

template <int PageSize, class T>
class CacheStore<Paged<PageSize>, T> {
 public:
  static constexpr bool heads_adjacent = false;  // head-major pages
  static constexpr bool heads_paged = true;      // a page holds every head's rows of its tokens

  CacheStore(std::span<const TensorSpec> tensors, const CacheConfig& config)
      : table_(config.max_sequences, config.capacity),
        poison_(config.poison_unused),
        n_pages_(pool_size(config)),
        chunk_pages_(chunk_size(config)),
        page_table_(std::size_t(config.max_sequences)) {
    for (const TensorSpec& spec : tensors) {
      require<ShapeError>(spec.heads >= 1 && spec.dim >= 1, "cache tensor shape must be positive, got (",
                          spec.heads, ", ", spec.dim, ")");
      specs_.push_back(spec);
      strides_.push_back(Paged<PageSize>::strides(spec, PageSize));
      pool_.emplace_back().reserve(detail::cache_buffer_elements<T>(std::uint64_t(n_pages_) * PageSize, spec));
      if (config.huge_pages)  // the reserved capacity is not touched yet: pages committed later come as 2 MiB pages
        detail::advise_huge_pages(pool_.back().data(), pool_.back().capacity() * sizeof(T));
    }
    references_.assign(std::size_t(n_pages_), 0);
    stamps_.assign(std::size_t(n_pages_), 0);
    free_pages_.reserve(std::size_t(n_pages_));
  }

  int open() { return table_.open(); }

  void close(int seq) {
    table_.close(seq);
    auto& pages = page_table_[std::size_t(seq)];
    for (int p : pages) {
      if (--references_[std::size_t(p)] > 0) continue;  // still held by a fork
      if (poison_)
        for (std::size_t t = 0; t < specs_.size(); ++t) std::ranges::fill(page_elements(t, p), fill_value());
      free_pages_.push_back(p);
    }
    pages.clear();
  }

  bool is_open(int seq) const { return table_.is_open(seq); }
  int free_slots() const { return table_.free_slots(); }
  int length(int seq) const { return table_.length(seq); }
  std::uint64_t generation(int seq) const { return table_.generation(seq); }
  int capacity() const { return table_.capacity(); }
  int max_sequences() const { return table_.max_sequences(); }
  /// Pages that can still be handed out: free committed pages and pages not committed yet.
  int free_pages() const { return int(free_pages_.size()) + n_pages_ - committed_pages_; }
  /// The most pages the pool may hold (the device mirror is sized for it).
  int pool_pages() const { return n_pages_; }
  /// Pages backed by memory so far (they stay committed once the sequences holding them close).
  int committed_pages() const { return committed_pages_; }
  /// Pages a sequence at full capacity holds (the length of a page table).
  int pages_per_sequence() const { return int(pages_for(capacity())); }
  std::span<const TensorSpec> tensors() const { return specs_; }

  void check_room(int seq, int n) const {
    const RowRequest request{seq, n};
    check_room(std::span(&request, 1));
  }

  /// The pages every request needs, summed, against the free pool: growing the sequences one
  /// after another must not run out part-way.
  void check_room(std::span<const RowRequest> requests) const {
    std::int64_t needed = 0;
    for (const RowRequest& r : requests) {
      table_.check_room(r.seq, r.rows);
      needed += pages_needed(r.seq, r.rows);
    }
    if (needed <= free_pages()) return;
    if (requests.size() == 1)
      throw CapacityError(detail::concat("polyattn: page pool exhausted: sequence ", requests[0].seq, " needs ", needed,
                                         " more page(s) of ", PageSize, " tokens, ", free_pages(), " of ", n_pages_, " are free"));
    throw CapacityError(detail::concat("polyattn: page pool exhausted: the ", requests.size(), " sequences of this call need ",
                                       needed, " more page(s) of ", PageSize, " tokens together, ", free_pages(), " of ", n_pages_,
                                       " are free"));
  }

  int grow(int seq, int n) {
    check_room(seq, n);
    auto& pages = page_table_[std::size_t(seq)];
    for (int k = pages_needed(seq, n); k > 0; --k) pages.push_back(take_page());
    return table_.grow(seq, n);
  }

  /// A new slot that shares the parent's full pages (they are never written again: rows are only
  /// appended). The last page is copied when it is partly filled, since both sequences will
  /// append to it, or when `private_last_row` says the last row will still be rewritten (Mtla's
  /// open row).
  int fork(int parent, bool private_last_row) {
    const int len = table_.length(parent);
    const auto& parent_pages = page_table_[std::size_t(parent)];
    const bool copy_last = fork_takes_page(parent, private_last_row);
    table_.check_free_slot();
    if (copy_last && free_pages() == 0)
      throw CapacityError(detail::concat("polyattn: page pool exhausted: forking sequence ", parent,
                                         " needs a page for its partly filled last page, 0 of ", n_pages_, " are free"));
    const int child = table_.open();
    table_.grow(child, len);
    auto& pages = page_table_[std::size_t(child)];
    pages = parent_pages;
    const std::size_t shared = pages.size() - (copy_last ? 1 : 0);
    for (std::size_t i = 0; i < shared; ++i) ++references_[std::size_t(pages[i])];
    if (copy_last) {
      const int from = pages.back();
      pages.back() = take_page();
      for (std::size_t t = 0; t < specs_.size(); ++t) std::ranges::copy(page_elements(t, from), page_elements(t, pages.back()).begin());
    }
    return child;
  }

  /// Whether fork(parent, private_last_row) takes a page from the pool.
  bool fork_takes_page(int parent, bool private_last_row) const {
    const int len = table_.length(parent);
    return !page_table_[std::size_t(parent)].empty() && (len % PageSize != 0 || private_last_row);
  }

  /// Free pages once the distinct open sequences `seqs` are closed: a page returns when every
  /// sequence holding it is among them. Changes nothing.
  int free_pages_after_closing(std::span<const int> seqs) const {
    std::vector<int> released(references_.size(), 0);
    int freed = 0;
    for (int seq : seqs)
      for (int p : pages_of(seq))
        if (++released[std::size_t(p)] == references_[std::size_t(p)]) ++freed;
    return free_pages() + freed;
  }

  /// Sequences holding page `page` (0: free; more than 1: shared by forks).
  int references(int page) const { return references_[std::size_t(page)]; }
  /// Changes each time page `page` is handed out (from 1; 0: never handed out), so that a copy of
  /// the pool (the CUDA mirror) knows which of its pages hold rows of an earlier owner. Between two
  /// hand-outs a page's rows are only appended, never rewritten, except a sequence's last row
  /// where the variant rewrites it (AttendSpec::rewrites_last_row).
  std::uint64_t page_stamp(int page) const { return stamps_[std::size_t(page)]; }

  T* row(int tensor, int seq, int token, int head) { return pool_[std::size_t(tensor)].data() + offset(tensor, seq, token, head); }
  const T* row(int tensor, int seq, int token, int head) const {
    return pool_[std::size_t(tensor)].data() + offset(tensor, seq, token, head);
  }

  CacheRun<T> run(int tensor, int seq, int token, int head) const {
    return {row(tensor, seq, token, head), std::ptrdiff_t(strides_[std::size_t(tensor)].token), PageSize - token % PageSize};
  }

  /// Bytes of the committed pages.
  std::size_t bytes_allocated() const {
    std::size_t bytes = 0;
    for (const auto& p : pool_) bytes += p.size() * sizeof(T);
    return bytes;
  }

  /// Pages open sequences hold, each counted once however many forks hold it.
  std::size_t bytes_held() const { return page_bytes() * pages_held_by(1); }
  /// The part of bytes_held() in pages that several sequences hold.
  std::size_t bytes_shared() const { return page_bytes() * pages_held_by(2); }
  /// What the open sequences would hold if each had its own copy of every page it holds.
  std::size_t bytes_if_unshared() const {
    return page_bytes() * std::size_t(std::accumulate(references_.begin(), references_.begin() + committed_pages_, std::size_t(0)));
  }

  /// The pages of a sequence, in token order (for tests and device copies).
  std::span<const int> pages_of(int seq) const {
    table_.check_open(seq);
    return page_table_[std::size_t(seq)];
  }

 private:
  T fill_value() const { return poison_ ? poison_element<T>() : T(0); }

  /// Pages that hold `tokens` tokens; in 64 bits, as tokens + PageSize - 1 may pass INT_MAX.
  static std::int64_t pages_for(std::int64_t tokens) { return (tokens + PageSize - 1) / PageSize; }

  /// Pages in the pool: config.pool_pages, or by default enough for every sequence at full
  /// capacity, refused beyond int (pages are numbered by int). After table_ checked the config.
  static int pool_size(const CacheConfig& config) {
    require<ShapeError>(config.pool_pages >= 0, "CacheConfig.pool_pages must be >= 0, got ", config.pool_pages);
    if (config.pool_pages > 0) return config.pool_pages;
    const std::int64_t per_sequence = pages_for(config.capacity);
    const std::int64_t pages = std::int64_t(config.max_sequences) * per_sequence;
    require<ShapeError>(pages <= std::numeric_limits<int>::max(), "Paged<", PageSize, ">: the default pool of ", config.max_sequences,
                        " sequences x ", per_sequence, " pages of ", PageSize, " tokens (capacity ", config.capacity, ") = ", pages,
                        " pages, more than ", std::numeric_limits<int>::max(),
                        "; set CacheConfig.pool_pages, or lower max_sequences or capacity");
    return int(pages);
  }

  /// Pages committed at a time: config.pool_chunk_pages, or one sequence at full capacity, at
  /// least 1 and at most the pool. After pool_size(config).
  static int chunk_size(const CacheConfig& config) {
    require<ShapeError>(config.pool_chunk_pages >= 0, "CacheConfig.pool_chunk_pages must be >= 0, got ", config.pool_chunk_pages);
    const std::int64_t chunk = config.pool_chunk_pages > 0 ? config.pool_chunk_pages : pages_for(config.capacity);
    return int(std::clamp<std::int64_t>(chunk, 1, std::max(1, pool_size(config))));
  }

  /// Pages `n` more tokens of `seq` take from the pool (after table_.check_room(seq, n)).
  int pages_needed(int seq, int n) const {
    const std::int64_t have = std::int64_t(page_table_[std::size_t(seq)].size());
    return int(std::max<std::int64_t>(0, pages_for(std::int64_t(table_.length(seq)) + n) - have));
  }

  /// After free_pages() > 0 was checked: a free committed page, committing a chunk first when
  /// there is none (new pages filled as closed ones are: NaN when poisoned, else 0).
  int take_page() {
    if (free_pages_.empty()) commit_chunk();
    const int p = free_pages_.back();
    free_pages_.pop_back();
    references_[std::size_t(p)] = 1;
    stamps_[std::size_t(p)] = ++pages_handed_out_;
    return p;
  }

  std::size_t page_bytes() const {
    std::size_t bytes = 0;
    for (const TensorSpec& spec : specs_) bytes += std::size_t(PageSize) * spec.elements() * sizeof(T);
    return bytes;
  }
  /// Committed pages that at least `holders` sequences hold.
  std::size_t pages_held_by(int holders) const {
    return std::size_t(std::count_if(references_.begin(), references_.begin() + committed_pages_, [&](int r) { return r >= holders; }));
  }

  void commit_chunk() {
    const int first = committed_pages_, count = std::min(chunk_pages_, n_pages_ - committed_pages_);
    for (std::size_t t = 0; t < specs_.size(); ++t)  // within the capacity reserved: no page moves
      pool_[t].resize(std::size_t(first + count) * PageSize * specs_[t].elements(), fill_value());
    committed_pages_ = first + count;
    for (int p = first + count - 1; p >= first; --p) free_pages_.push_back(p);  // hand out the lowest first
  }

  /// Every element of page `page` of tensor `tensor`: one block, whatever the order inside it.
  std::span<T> page_elements(std::size_t tensor, int page) {
    return std::span(pool_[tensor]).subspan(std::size_t(strides_[tensor].offset(page, 0, 0)), PageSize * specs_[tensor].elements());
  }

  std::size_t offset(int tensor, int seq, int token, int head) const {
    const int page = page_table_[std::size_t(seq)][std::size_t(token / PageSize)];
    return std::size_t(strides_[std::size_t(tensor)].offset(page, token % PageSize, head));
  }

  SequenceTable table_;
  bool poison_;
  int n_pages_ = 0;          // the pool's limit
  int chunk_pages_ = 1;      // pages committed at a time
  int committed_pages_ = 0;  // pages [0, committed_pages_) are backed by pool_
  std::vector<TensorSpec> specs_;
  std::vector<TensorStrides> strides_;          // per tensor: Paged::strides(spec, PageSize)
  // per tensor: (page, head, token in page, dim), from a cache line; capacity for n_pages_
  std::vector<detail::CacheLineVector<T>> pool_;
  std::vector<std::vector<int>> page_table_;    // per sequence: pages in token order
  std::vector<int> free_pages_;                 // committed pages no sequence holds
  std::vector<int> references_;                 // per page: sequences holding it
  std::vector<std::uint64_t> stamps_;           // per page: page_stamp()
  std::uint64_t pages_handed_out_ = 0;
};

}  // namespace polyattn
