// Where a cache row lives, as a small POD that CUDA kernels take by value. Every layout is one
// formula: a sequence's tokens are split into pages of `page_size` tokens, and
//   row(tensor, seq, token, head) = data[tensor] + page * page_stride
//                                   + (token % page_size) * token_stride + head * head_stride
// with page = page_table[seq * pages_per_seq + token / page_size] for Paged<P>, and for the
// contiguous layouts page = seq with page_size = capacity (one page per sequence). The strides
// come from the host store in exactly one place, `device_geometry()` below.
//
// Plain C++ (no CUDA types), so the addressing is checked against the host stores by an ordinary
// test on any machine, GPU or not (tests/test_cuda_layout.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "polyattn/cache/contiguous.hpp"
#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/cache/paged.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/host_device.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn::exec::cuda {

/// Cached tensors a device view can hold (MHA: K and V; K-only and X-cache: one).
inline constexpr int kMaxCachedTensors = 4;

/// Strides of one cached tensor, in elements.
struct TensorStrides {
  std::int64_t page = 0;   ///< between pages (contiguous: between sequences)
  std::int64_t token = 0;  ///< between consecutive tokens of a page
  std::int64_t head = 0;   ///< between heads of one token
};

/// The device layout view: base pointers, strides and the page table. Trivially copyable.
template <class T>
struct DeviceCacheView {
  T* data[kMaxCachedTensors] = {};
  TensorStrides strides[kMaxCachedTensors] = {};
  int heads[kMaxCachedTensors] = {};
  int dim[kMaxCachedTensors] = {};
  int tensors = 0;
  int page_size = 1;              ///< tokens per page (contiguous: capacity)
  int pages_per_seq = 1;          ///< row length of the page table
  const int* page_table = nullptr;  ///< (max_sequences, pages_per_seq); null: page = seq

  POLYATTN_HOST_DEVICE T* row(int tensor, int seq, int token, int head) const {
    const int page = page_table ? page_table[std::int64_t(seq) * pages_per_seq + token / page_size] : seq;
    const TensorStrides& s = strides[tensor];
    return data[tensor] + std::int64_t(page) * s.page + std::int64_t(token % page_size) * s.token +
           std::int64_t(head) * s.head;
  }
};

/// A host store's layout in the terms of DeviceCacheView, without its pointers: what the device
/// mirror allocates (`pages` pages per tensor) and how it addresses them.
struct DeviceGeometry {
  bool paged = false;
  int page_size = 1;
  int pages = 0;          ///< pages per tensor (contiguous: max_sequences)
  int pages_per_seq = 1;  ///< page-table row length (paged only)
  int max_sequences = 0;
  std::vector<TensorSpec> tensors;
  std::vector<TensorStrides> strides;

  std::size_t elements(int tensor) const {
    return std::size_t(pages) * std::size_t(page_size) * tensors[std::size_t(tensor)].elements();
  }
};

namespace detail {
template <class Store>
DeviceGeometry base_geometry(const Store& store, bool paged, int page_size, int pages) {
  DeviceGeometry g;
  g.paged = paged;
  g.page_size = page_size;
  g.pages = pages;
  g.max_sequences = store.max_sequences();
  g.tensors.assign(store.tensors().begin(), store.tensors().end());
  require<ShapeError>(int(g.tensors.size()) <= kMaxCachedTensors, "the CUDA executor handles at most ", kMaxCachedTensors,
                      " cached tensors, the variant caches ", g.tensors.size());
  return g;
}
}  // namespace detail

/// Primary template: a store without a device layout is a compile-time error.
template <class Store>
DeviceGeometry device_geometry(const Store&) {
  static_assert(dependent_false<Store>,
                "polyattn: the CUDA executor has no device layout for this cache store; add a device_geometry() "
                "overload in exec/cuda/device_layout.hpp (Nhd, Hnd and Paged<P> exist)");
  return {};
}

/// Nhd: (seq, token, head, dim); a sequence is one page of `capacity` tokens.
template <class T>
DeviceGeometry device_geometry(const CacheStore<Nhd, T>& store) {
  DeviceGeometry g = detail::base_geometry(store, false, store.capacity(), store.max_sequences());
  for (const TensorSpec& s : g.tensors)
    g.strides.push_back({std::int64_t(store.capacity()) * s.heads * s.dim, std::int64_t(s.heads) * s.dim, s.dim});
  return g;
}

/// Hnd: (seq, head, token, dim).
template <class T>
DeviceGeometry device_geometry(const CacheStore<Hnd, T>& store) {
  DeviceGeometry g = detail::base_geometry(store, false, store.capacity(), store.max_sequences());
  for (const TensorSpec& s : g.tensors)
    g.strides.push_back({std::int64_t(s.heads) * store.capacity() * s.dim, s.dim, std::int64_t(store.capacity()) * s.dim});
  return g;
}

/// Paged<P>: (page, token in page, head, dim), pages found through the page table.
template <int P, class T>
DeviceGeometry device_geometry(const CacheStore<Paged<P>, T>& store) {
  DeviceGeometry g = detail::base_geometry(store, true, P, store.pool_pages());
  g.pages_per_seq = store.pages_per_sequence();
  for (const TensorSpec& s : g.tensors) g.strides.push_back({std::int64_t(P) * s.heads * s.dim, std::int64_t(s.heads) * s.dim, s.dim});
  return g;
}

/// The view over `data` (one buffer per tensor, `geometry.elements(t)` each) and `page_table`.
template <class T>
DeviceCacheView<T> make_view(const DeviceGeometry& geometry, T* const* data, const int* page_table) {
  DeviceCacheView<T> v;
  v.tensors = int(geometry.tensors.size());
  for (int t = 0; t < v.tensors; ++t) {
    v.data[t] = data[t];
    v.strides[t] = geometry.strides[std::size_t(t)];
    v.heads[t] = geometry.tensors[std::size_t(t)].heads;
    v.dim[t] = geometry.tensors[std::size_t(t)].dim;
  }
  v.page_size = geometry.page_size;
  v.pages_per_seq = geometry.pages_per_seq;
  v.page_table = geometry.paged ? page_table : nullptr;
  return v;
}

}  // namespace polyattn::exec::cuda
