// Runtime shapes shared by every policy.
#pragma once

#include <cstddef>

namespace polyattn {

/// Query-side shape of one attention layer: `n_heads` query heads of `head_dim` each.
/// Variants derive their cache shape (KV heads, latent width...) from it.
struct AttentionShape {
  int n_heads = 0;
  int head_dim = 0;
  int model_dim = 0;  ///< width of the layer input x (X-cache, latent projections); 0 = n_heads * head_dim

  constexpr int query_width() const { return n_heads * head_dim; }
  constexpr int input_width() const { return model_dim > 0 ? model_dim : n_heads * head_dim; }
};

/// Per-token shape of one cached tensor: `heads` rows of `dim` elements.
/// MHA caches two (K and V, each (kv_heads, head_dim)); an X-cache caches one (1, d_model).
struct TensorSpec {
  int heads = 0;
  int dim = 0;
  int segment = 0;  ///< int8 caches: elements of a row that share one float scale (0: the whole row;
                    ///< core/row_scales.hpp). A store is given the rows' stored width as `dim`
  constexpr std::size_t elements() const { return std::size_t(heads) * std::size_t(dim); }
};

/// How much cache an `Attention` object owns.
struct CacheConfig {
  int max_sequences = 1;  ///< sequences that can be open at once (the decode batch)
  int capacity = 448;     ///< tokens per sequence (Whisper's decoder context is 448)
  int pool_pages = 0;     ///< paged layouts: the most pages the pool may hold; 0 = enough for every sequence at full capacity
  int pool_chunk_pages = 0;  ///< paged layouts: pages the pool commits at a time when a sequence needs more; 0 = one
                             ///< sequence at full capacity. Memory follows the pages in use, not the limit
  bool poison_unused = false;  ///< fill unused and freed rows with NaN, so a read past the end shows
  bool huge_pages = false;     ///< ask the OS for 2 MiB pages (Linux: madvise(MADV_HUGEPAGE), cache/huge_pages.hpp):
                               ///< fewer TLB misses when a step streams a long cache, but a contiguous layout's
                               ///< reserved capacity is then committed 2 MiB, not 4 KiB, at a time as rows are written
};

/// Memory of a cache (Attention::cache_memory). `held` counts each row once, however many
/// sequences hold it: the sum of cache_bytes_used over the open sequences, minus `held`, is what
/// sharing saves, and `allocated` minus `held` what the store keeps unused.
struct CacheMemory {
  std::size_t allocated = 0;  ///< bytes the store has committed
  std::size_t held = 0;       ///< bytes of the rows open sequences hold
  std::size_t shared = 0;     ///< the part of `held` that several sequences hold (Paged<P> forks share full pages)
  std::size_t unshared = 0;   ///< what the open sequences would hold if none shared: each its own rows (pages)
};

}  // namespace polyattn
