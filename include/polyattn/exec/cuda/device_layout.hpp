// Where a cache row lives, as a small POD that CUDA kernels take by value. Every layout is the
// one formula of cache/tensor_strides.hpp, which the host stores use too:
//   row(tensor, seq, token, head) = data[tensor] + strides.offset(page, token % page_size, head)
// with page = page_table[seq * pages_per_seq + token / page_size] for Paged<P>, and for the
// contiguous layouts page = seq with page_size = capacity (one page per sequence). The strides
// are the layout tag's own (Layout::strides), taken in `device_geometry()` below.
//
// Plain C++ (no CUDA types), so the addressing is checked against the host stores by an ordinary
// test on any machine, GPU or not (tests/test_cuda_layout.cpp).
#pragma once

#include <cstddef>
#include <concepts>
#include <cstdint>
#include <vector>

#include "polyattn/cache/contiguous.hpp"
#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/cache/paged.hpp"
#include "polyattn/cache/tensor_strides.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/host_device.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn::exec::cuda {

/// Cached tensors a device view can hold (MHA: K and V; K-only and X-cache: one).
inline constexpr int kMaxCachedTensors = 4;

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
    return data[tensor] + strides[tensor].offset(page, token % page_size, head);
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

/// Nhd and Hnd: a sequence is one page of `capacity` tokens.
template <class Layout, class T>
  requires std::same_as<Layout, Nhd> || std::same_as<Layout, Hnd>
DeviceGeometry device_geometry(const CacheStore<Layout, T>& store) {
  DeviceGeometry g = detail::base_geometry(store, false, store.capacity(), store.max_sequences());
  for (const TensorSpec& s : g.tensors) g.strides.push_back(Layout::strides(s, store.capacity()));
  return g;
}

/// Paged<P>: pages of P tokens found through the page table.
template <int P, class T>
DeviceGeometry device_geometry(const CacheStore<Paged<P>, T>& store) {
  DeviceGeometry g = detail::base_geometry(store, true, P, store.pool_pages());
  g.pages_per_seq = store.pages_per_sequence();
  for (const TensorSpec& s : g.tensors) g.strides.push_back(Paged<P>::strides(s, P));
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
