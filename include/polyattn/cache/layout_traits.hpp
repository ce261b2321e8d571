// The cache-layout trait. A layout is a tag type (Nhd, Hnd, Paged<P>, ...); `CacheStore<Layout, T>`
// is the storage it selects. Every store offers the same interface, which is all executors see:
//
//   CacheStore(std::span<const TensorSpec> tensors, const CacheConfig&)
//   static constexpr bool heads_adjacent;    // a token's heads follow one another (Nhd): an
//                                            // executor reads a tile's rows for all heads together
//   static constexpr bool heads_paged;       // (optional, false if absent) all heads' rows of a
//                                            // token lie in one page (Paged<P>): an executor reads a
//                                            // tile's pages for all heads together
//   int  open();  void close(int seq);  int length(int seq) const;  bool is_open(int seq) const;
//   std::uint64_t generation(int seq) const;  // stamp of this opening (tells reopen from growth)
//   void check_room(int seq, int n) const;   // throws CapacityError, changes nothing
//   void check_room(std::span<const RowRequest> requests) const;
//                                            // the same for all of one call's growth at once: every
//                                            // (seq, rows) fits together (for Paged: the pages all of
//                                            // them need, against the free pool); each seq at most once
//   int  grow(int seq, int n);               // reserves n tokens, returns the first position
//   int  free_slots() const;                 // sequence slots open() can still hand out
//   int  fork(int parent, bool private_last_row);
//                                            // opens a slot holding the parent's rows (Paged:
//                                            // shares its full pages; the last page is copied when
//                                            // partly filled, or when private_last_row says its last
//                                            // row will still be rewritten); throws, changing nothing
//   T*   row(int tensor, int seq, int token, int head);        // `dim` contiguous elements
//   CacheRun<T> run(int tensor, int seq, int token, int head) const;  // rows from `token` on
//   std::size_t bytes_allocated() const;
//   std::size_t bytes_held() const;          // rows of open sequences, each shared row once
//   std::size_t bytes_shared() const;        // the part of bytes_held() several sequences hold
//
// Within a row the `dim` elements are contiguous in every layout; layouts differ only in the
// stride between consecutive tokens and where a run of such rows ends (a page boundary).
// A call that writes several sequences (Attention::decode) checks all of them with one
// check_room before it grows any, so that a failure leaves every sequence as it was.
#pragma once

#include <cstddef>
#include <type_traits>

namespace polyattn {

/// Rows one call will add to one sequence (what check_room is asked about).
struct RowRequest {
  int seq = 0;
  int rows = 0;
};

/// Consecutive cached rows of one (tensor, sequence, head): row i is at data + i * stride,
/// valid for i < count (the end of the contiguous block, not the sequence length).
template <class T>
struct CacheRun {
  const T* data = nullptr;
  std::ptrdiff_t stride = 0;
  int count = 0;
};

template <class>
inline constexpr bool dependent_false = false;

/// Primary template: a layout without a store specialization is a compile-time error.
template <class Layout, class T>
class CacheStore {
  static_assert(dependent_false<Layout>,
                "polyattn: no CacheStore specialization for this layout; use Nhd, Hnd or Paged<P> "
                "(include polyattn/cache/contiguous.hpp or polyattn/cache/paged.hpp)");
};

}  // namespace polyattn
