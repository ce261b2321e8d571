// The CUDA executor: `Attention<Variant, Layout, exec::Cuda, T>` runs the attend primitive on
// the GPU with the same API and results as the CPU executors.
//
// The host CacheStore stays the source of truth (variants write rows into it). The executor keeps
// a device mirror of the store's tensors and page table, laid out exactly like the host store
// (same pages), and before each attend copies what the batch's sequences gained since the last
// call (mirror_plan.hpp): new rows are gathered into pinned staging, copied in one transfer and
// placed by a scatter kernel through the same layout view the attention kernels read. Then
// queries go up, the kernels run on the executor's stream (a prefill's rows in blocks,
// prefill_blocks.cuh; decode rows split-K, attend_tiles or attend_chunks + merge_chunks), and
// outputs come back.
//
// Compile in a .cu translation unit (nvcc, C++20). A TU that also includes Eigen (attention.hpp
// does) should define EIGEN_NO_CUDA so Eigen stays host-only, as the project's CMake does.
//
// Variants: every one whose attend reads rows as cached (Mha/Gqa/Mqa, SlimK2, XCache, Mla, Mtla);
// their query/output hooks run on the host (attend_with_hooks). Variants that derive rows at
// attend time (derives_rows: SlimK1, SlimK with RoPE) are refused at compile time there.
// Cache elements: float, double, and 16-bit Eigen::half / Eigen::bfloat16 (read on the device as
// __half / __nv_bfloat16, accumulated in fp32).
// Limits, checked with a clear error: key_dim and value_dim <= 2048, at most 4 cached tensors.
// Rows are assumed immutable once written, except each sequence's last row where the spec says
// the variant rewrites it (AttendSpec::rewrites_last_row, MTLA's merge into the open slot): the
// mirror re-copies it at every attend (mirror_plan.hpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <optional>
#include <vector>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/attention_heads.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/mask.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/threads.hpp"
#include "polyattn/exec/cuda/cuda_error.cuh"
#include "polyattn/exec/cuda/device_layout.hpp"
#include "polyattn/exec/cuda/device_memory.cuh"
#include "polyattn/exec/cuda/attend_stream.cuh"
#include "polyattn/exec/cuda/attend_tiles.cuh"
#include "polyattn/exec/cuda/kernels.cuh"
#include "polyattn/exec/cuda/mirror_plan.hpp"
#include "polyattn/exec/cuda/prefill_blocks.cuh"
#include "polyattn/exec/cuda/prefill_tiles.cuh"
#include "polyattn/exec/cuda/query_blocks.hpp"

namespace Eigen {  // declared, not included: this header leaves Eigen to the including TU
struct half;
struct bfloat16;
}  // namespace Eigen

namespace polyattn::exec {

namespace cuda {

/// The device type of a cache element (core/cache_element.hpp): the same bits, as a type device
/// code converts to float. Eigen's 16-bit types are host-only here (EIGEN_NO_CUDA), CUDA's are
/// their bit-for-bit twins (IEEE binary16; bfloat16 = float's upper half): rows are copied as
/// bytes from the host store into the mirror.
template <class T>
struct device_element {
  using type = T;
};
template <>
struct device_element<Eigen::half> {
  using type = __half;
};
template <>
struct device_element<Eigen::bfloat16> {
  using type = __nv_bfloat16;
};
template <class T>
using device_element_t = typename device_element<T>::type;

/// CUDA devices visible to this process; 0 with `reason` set when there is none or no driver.
inline int device_count(std::string* reason = nullptr) {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
    return 0;
  }
  if (count == 0 && reason) *reason = "cudaGetDeviceCount reports 0 devices";
  return count;
}

}  // namespace cuda

class Cuda {
 public:
  /// The executor keeps a device copy of each cache row, copied once after it is written.
  static constexpr bool mirrors_cache_rows = true;
  static std::string name() { return "cuda"; }

  /// Bytes of pinned staging for cache rows; larger updates are copied in several rounds.
  static constexpr std::size_t kStagingBytes = std::size_t(64) << 20;

  /// Uses the current CUDA device; `threads` (host threads) is ignored. Throws CudaError when no
  /// device is usable.
  explicit Cuda(const Threads& /*threads*/ = {}) : device_(usable_device()) {
    POLYATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
    int max_shared = 0;
    POLYATTN_CUDA_CHECK(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    max_shared_bytes_ = std::size_t(max_shared);
  }

  int device() const { return device_; }

  /// Which kernels run. automatic (the default): a prefill kernel where plan_prefill accepts the
  /// call (rows in runs of one sequence; the register-tiled kernel where its shared memory fits,
  /// else the simple one), else the streaming decode kernel where plan_stream accepts it, else the
  /// tiled one where plan_tiles accepts it, else the general one. simple_prefill: as automatic,
  /// but never the register-tiled prefill kernel. decode: never a prefill kernel, each query row a
  /// job of the decode kernels. general: always the general decode kernel. tiled: as automatic,
  /// but never the streaming kernel. The last four are for comparisons, in tests and benchmarks.
  enum class Kernel { automatic, simple_prefill, decode, general, tiled };
  void set_kernel(Kernel kernel) { kernel_ = kernel; }
  Kernel kernel() const { return kernel_; }
  /// How far the prefill kernel splits its query blocks' tokens: into chunks until about this many
  /// blocks per SM run (plan_chunks); 0 never splits. For comparisons, in benchmarks.
  void set_prefill_blocks_per_sm(int blocks) { prefill_blocks_per_sm_ = blocks; }
  /// The same for the streaming decode kernel (default kStreamBlocksPerSm). For comparisons.
  void set_stream_blocks_per_sm(int blocks) { stream_blocks_per_sm_ = blocks; }
  /// GPU time of the last call's kernels (prefill or decode kernels, and merge_chunks), without copies.
  double last_kernel_seconds() const { return last_kernel_seconds_; }
  /// Token rows copied into the cache mirror since the executor was made (one count per token,
  /// every cached tensor's row of it included): a fork on Paged<P> adds only its own pages' rows.
  std::uint64_t rows_uploaded() const { return rows_uploaded_; }
  /// Device bytes held for the cache mirror.
  std::size_t mirror_bytes() const {
    std::size_t bytes = page_table_.size() * sizeof(int);
    for (const auto& t : tensors_) bytes += t.size();
    return bytes;
  }

  /// A key mask (core/key_mask.hpp) gives each job its tokens [first, end), which the kernels'
  /// chunks cover; masks that drop keys inside that range are not supported here yet.
  template <KeyMask KeyMaskT = PrefixMask, class Store>
  void attend(const Store& store, const AttendSpec& spec, std::span<const QueryJob> jobs) {
    static_assert(!KeyMaskT::drops_keys,
                  "polyattn: exec::Cuda takes key masks that give each row a range of tokens (PrefixMask, SlidingWindow), "
                  "not masks that drop keys inside it (drops_keys): use a CPU executor");
    // The device reads the host's bits through a type device code converts to float.
    using Host = std::remove_cvref_t<decltype(*store.row(0, 0, 0, 0))>;
    static_assert(!std::is_same_v<Host, std::int8_t>,
                  "polyattn: int8 caches run on exec::Reference and exec::CpuSimd, not yet on exec::Cuda");
    using T = cuda::device_element_t<Host>;
    static_assert(sizeof(T) == sizeof(Host), "polyattn: a cache element and its device type must have the same bits");
    if (jobs.empty()) return;
    check_spec(store, spec);
    for (const QueryJob& job : jobs)  // the mirror holds `length` tokens; reading past them is garbage
      require<ShapeError>(job.visible >= 0 && job.visible <= store.length(job.seq), "Cuda executor: a job of sequence ", job.seq,
                          " sees ", job.visible, " tokens but the sequence holds ", store.length(job.seq));
    POLYATTN_CUDA_CHECK(cudaSetDevice(device_));
    try {
      bind<T>(store);
      sync<T>(store, spec, jobs);
      run<T, KeyMaskT>(spec, jobs);
    } catch (...) {
      cudaStreamSynchronize(stream_.get());  // no copy may still read the pinned buffers
      cudaGetLastError();
      bound_ = nullptr;  // a copy may have been half done: trust nothing on the device
      throw;
    }
  }

  /// Rows of a float matrix on this device: row i starts at data + i * row_stride (elements).
  template <class F>
  struct DeviceRows {
    F* data = nullptr;
    std::int64_t row_stride = 0;
  };

  /// Uncached attention over float matrices already on this device (an encoder's self-attention,
  /// whose q, k and v come out of a product on the GPU): the prefill kernel reads them where they
  /// are, with no mirror and no copies of the matrices. Shapes and masks as polyattn::attention
  /// (uncached_attention.hpp): q (n, query_heads * head_dim), k (n_keys, kv_heads * head_dim),
  /// v (n_keys, kv_heads * value_dim), out (n, query_heads * value_dim); Mask::causal makes the n
  /// rows the last n of the n_keys positions. Heads up to kPrefillMaxDim (256) wide, within the
  /// device's shared memory (query_blocks.hpp). Runs on `stream` (null: the legacy default stream),
  /// after whatever the caller queued there, and returns once it is done.
  template <KeyMask KeyMaskT = PrefixMask>
  void attention(DeviceRows<const float> q, DeviceRows<const float> k, DeviceRows<const float> v, DeviceRows<float> out, int n,
                 int n_keys, const AttentionHeads& heads, Mask mask, cudaStream_t stream = nullptr) {
    static_assert(!KeyMaskT::drops_keys, "polyattn: exec::Cuda takes key masks that give each row a range of tokens");
    const int hq = heads.query_heads, hkv = heads.kv_heads, dh = heads.head_dim, dv = heads.values();
    heads.check("Cuda::attention");
    const AttendSpec spec = heads.spec();
    require<ShapeError>(dh <= cuda::kPrefillMaxDim && dv <= cuda::kPrefillMaxDim, "Cuda::attention: heads of ", dh, " and values of ", dv,
                        " columns; at most ", cuda::kPrefillMaxDim);
    const std::optional<cuda::PrefillKernel> kernel = cuda::choose_prefill_kernel(spec, max_shared_bytes_, kernel_ != Kernel::simple_prefill);
    require<ShapeError>(kernel.has_value(), "Cuda::attention: heads of ", dh, " and values of ", dv, " need ",
                        cuda::prefill_shared_bytes(spec), " bytes of shared memory a block; this device gives ", max_shared_bytes_);
    require<ShapeError>(hq <= cuda::kMaxGridYZ, "Cuda::attention: too many heads (", hq, ") for one launch");
    require<ShapeError>(n >= 0 && n_keys >= 0, "Cuda::attention: ", n, " rows over ", n_keys, " keys");
    require<ShapeError>(q.row_stride >= std::int64_t(hq) * dh && k.row_stride >= std::int64_t(hkv) * dh &&
                            v.row_stride >= std::int64_t(hkv) * dv && out.row_stride >= std::int64_t(hq) * dv,
                        "Cuda::attention: a row stride is narrower than its row (q ", q.row_stride, ", k ", k.row_stride, ", v ",
                        v.row_stride, ", out ", out.row_stride, ")");
    if (n == 0) return;
    POLYATTN_CUDA_CHECK(cudaSetDevice(device_));
    if (!stream) stream = cudaStreamLegacy;  // ordered after the caller's work on the default stream

    jobs_.reserve(std::size_t(n));
    jobs_device_.reserve(std::size_t(n));
    for (int i = 0; i < n; ++i) {
      const KeyRange keys = KeyMaskT::range(QueryJob{0, uncached_visible(mask, i, n, n_keys), nullptr, nullptr});
      jobs_.data()[i] = {0, keys.first, std::max(keys.first, keys.end)};
    }
    const cuda::PrefillPlan plan{*kernel, cuda::query_blocks(std::span<const cuda::DeviceJob>(jobs_.data(), std::size_t(n)),
                                                             cuda::prefill_rows(*kernel))};
    // k and v as a two-tensor "cache" of one sequence: one page of n_keys tokens, heads side by side
    // in a row. The kernels only read through it (float*, not const float*, so that the float
    // cache's kernels serve).
    cuda::DeviceCacheView<float> cache;
    cache.tensors = 2;
    cache.data[0] = const_cast<float*>(k.data);
    cache.data[1] = const_cast<float*>(v.data);
    cache.strides[0] = {0, k.row_stride, dh};
    cache.strides[1] = {0, v.row_stride, dv};
    cache.heads[0] = cache.heads[1] = hkv;
    cache.dim[0] = dh;
    cache.dim[1] = dv;
    cache.page_size = std::max(1, n_keys);
    try {
      POLYATTN_CUDA_CHECK(cudaMemcpyAsync(jobs_device_.data(), jobs_.data(), std::size_t(n) * sizeof(cuda::DeviceJob),
                                          cudaMemcpyHostToDevice, stream));
      run_blocks<float>(cache, spec, std::size_t(n), plan, q.data, q.row_stride, out.data, out.row_stride, stream);
      POLYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
      last_kernel_seconds_ = stop_.seconds_since(start_);
    } catch (...) {
      cudaStreamSynchronize(stream);  // no copy may still read the pinned buffers
      cudaGetLastError();
      throw;
    }
  }

 private:
  static int usable_device() {
    std::string reason;
    if (cuda::device_count(&reason) == 0) throw CudaError("cudaGetDeviceCount (" + reason + ")", cudaErrorNoDevice);
    int device = 0;
    POLYATTN_CUDA_CHECK(cudaGetDevice(&device));
    return device;
  }

  template <class Store>
  static void check_spec(const Store& store, const AttendSpec& spec) {
    const auto tensors = store.tensors();
    const auto check_tensor = [&](int tensor, int offset, int dim, const char* what) {
      require<ShapeError>(tensor >= 0 && tensor < int(tensors.size()), "Cuda executor: ", what, " tensor ", tensor,
                          " does not exist (the cache has ", tensors.size(), ")");
      const TensorSpec& t = tensors[std::size_t(tensor)];
      require<ShapeError>(offset >= 0 && dim >= 1 && offset + dim <= t.dim, "Cuda executor: ", what, " columns [", offset, ", ",
                          offset + dim, ") do not fit a cached row of ", t.dim);
      require<ShapeError>(spec.cache_heads <= t.heads, "Cuda executor: ", spec.cache_heads, " cache heads but ", what,
                          " tensor ", tensor, " has ", t.heads);
    };
    require<ShapeError>(spec.cache_heads >= 1 && spec.group >= 1, "Cuda executor: cache_heads and group must be >= 1, got ",
                        spec.cache_heads, " and ", spec.group);
    check_tensor(spec.key_tensor, spec.key_offset + (spec.group - 1) * spec.key_group_stride, spec.key_dim, "key");
    check_tensor(spec.value_tensor, spec.value_offset, spec.value_dim, "value");
    require<ShapeError>(spec.key_dim <= cuda::kMaxKeyDim && spec.value_dim <= cuda::kMaxValueDim, "Cuda executor: key_dim ",
                        spec.key_dim, " and value_dim ", spec.value_dim, " must be <= ", cuda::kMaxKeyDim);
    const long long head_blocks = (long long)spec.cache_heads * ((spec.group + cuda::kGroupTile - 1) / cuda::kGroupTile);
    require<ShapeError>(head_blocks <= cuda::kMaxGridYZ && spec.query_heads() <= cuda::kMaxGridYZ,
                        "Cuda executor: too many heads (", spec.query_heads(), ") for one launch");
  }

  /// Allocates the mirror for `store` (once per store; a moved or different store starts over).
  template <class T, class Store>
  void bind(const Store& store) {
    if (bound_ == &store) return;
    geometry_ = cuda::device_geometry(store);
    tensors_.resize(geometry_.tensors.size());
    for (std::size_t t = 0; t < tensors_.size(); ++t) tensors_[t].reserve(geometry_.elements(int(t)) * sizeof(T));
    if (geometry_.paged) page_table_.reserve(std::size_t(geometry_.max_sequences) * std::size_t(geometry_.pages_per_seq));
    tracker_.reset(geometry_);
    bound_ = &store;
  }

  template <class T>
  cuda::DeviceCacheView<T> view() const {
    T* data[cuda::kMaxCachedTensors] = {};
    for (std::size_t t = 0; t < tensors_.size(); ++t) data[t] = reinterpret_cast<T*>(tensors_[t].data());
    return cuda::make_view<T>(geometry_, data, page_table_.data());
  }

  /// Brings the mirror of the batch's sequences up to date.
  template <class T, class Store>
  void sync(const Store& store, const AttendSpec& spec, std::span<const QueryJob> jobs) {
    const cuda::MirrorPlan plan = tracker_.plan(store, jobs, spec.rewrites_last_row);
    const std::size_t pps = std::size_t(geometry_.pages_per_seq);
    for (const cuda::PageTableRange& r : plan.page_tables) {  // before the rows placed through them
      const std::size_t at = std::size_t(r.seq) * pps + std::size_t(r.first);
      POLYATTN_CUDA_CHECK(cudaMemcpyAsync(page_table_.data() + at, tracker_.page_table() + at, std::size_t(r.count) * sizeof(int),
                                          cudaMemcpyHostToDevice, stream_.get()));
    }
    if (plan.rows.empty()) return;

    // Gather rows (all heads of one token of one tensor) into pinned staging, flushing when full.
    std::size_t row_elements = 0, total = 0, largest = 0, smallest = SIZE_MAX;
    for (const TensorSpec& t : geometry_.tensors) {
      row_elements += t.elements();
      largest = std::max(largest, t.elements());
      smallest = std::min(smallest, t.elements());
    }
    for (const cuda::RowRange& r : plan.rows) {
      total += std::size_t(r.count) * row_elements;
      rows_uploaded_ += std::uint64_t(r.count);
    }
    const std::size_t capacity = std::min(total, std::max(kStagingBytes / sizeof(T), largest));
    staging_.reserve(capacity * sizeof(T));
    staging_device_.reserve(capacity * sizeof(T));
    staged_rows_.reserve(capacity / smallest + 1);
    staged_rows_device_.reserve(staged_rows_.size());

    T* staging = reinterpret_cast<T*>(staging_.data());
    std::size_t used = 0, n_rows = 0;
    const auto flush = [&](bool wait) {
      if (n_rows == 0) return;
      POLYATTN_CUDA_CHECK(cudaMemcpyAsync(staging_device_.data(), staging_.data(), used * sizeof(T), cudaMemcpyHostToDevice,
                                          stream_.get()));
      POLYATTN_CUDA_CHECK(cudaMemcpyAsync(staged_rows_device_.data(), staged_rows_.data(), n_rows * sizeof(cuda::StagedRow),
                                          cudaMemcpyHostToDevice, stream_.get()));
      cuda::scatter_rows<T><<<unsigned(n_rows), 128, 0, stream_.get()>>>(
          view<T>(), staged_rows_device_.data(), reinterpret_cast<const T*>(staging_device_.data()));
      cuda::check_launch("scatter_rows");
      if (wait) stream_.synchronize();  // before the pinned buffers are refilled
      used = n_rows = 0;
    };
    for (const cuda::RowRange& r : plan.rows)
      for (int token = r.first; token < r.first + r.count; ++token)
        for (int t = 0; t < int(geometry_.tensors.size()); ++t) {
          const TensorSpec& spec = geometry_.tensors[std::size_t(t)];
          if (used + spec.elements() > capacity || n_rows == staged_rows_.size()) flush(true);
          staged_rows_.data()[n_rows++] = {t, r.seq, token, 0, std::int64_t(used)};
          for (int h = 0; h < spec.heads; ++h)
            std::memcpy(static_cast<void*>(staging + used + std::size_t(h) * spec.dim), store.row(t, r.seq, token, h),
                        std::size_t(spec.dim) * sizeof(T));  // host bits into the device type (device_element)
          used += spec.elements();
        }
    flush(false);  // stream order puts it before the kernels; run() waits before the next refill
  }

  /// Uploads the queries, runs the kernels, downloads the outputs.
  template <class T, class KeyMaskT>
  void run(const AttendSpec& spec, std::span<const QueryJob> jobs) {
    const int n = int(jobs.size()), query_heads = spec.query_heads();
    const std::size_t q_row = std::size_t(query_heads) * spec.key_dim, out_row = std::size_t(query_heads) * spec.value_dim;
    jobs_.reserve(jobs.size());
    jobs_device_.reserve(jobs.size());
    queries_.reserve(jobs.size() * q_row);
    queries_device_.reserve(jobs.size() * q_row);
    int max_visible = 0;
    for (int j = 0; j < n; ++j) {
      const QueryJob& job = jobs[std::size_t(j)];
      const KeyRange keys = KeyMaskT::range(job);
      jobs_.data()[j] = {job.seq, keys.first, std::max(keys.first, keys.end)};
      std::memcpy(queries_.data() + std::size_t(j) * q_row, job.query, q_row * sizeof(float));
      max_visible = std::max(max_visible, keys.size());
    }
    // A prefill kernel where the rows come in runs (query_blocks.hpp); else the tiled decode
    // kernel where the call fits it (tile_plan.hpp), else the general one.
    if (kernel_ == Kernel::automatic || kernel_ == Kernel::simple_prefill)
      if (const auto plan = cuda::plan_prefill(spec, std::span<const cuda::DeviceJob>(jobs_.data(), std::size_t(n)), max_shared_bytes_,
                                               kernel_ == Kernel::automatic)) {
        run_prefill<T>(spec, jobs, *plan);
        return;
      }
    const std::optional<cuda::StreamShape> streams = kernel_ != Kernel::general && kernel_ != Kernel::tiled
                                                         ? cuda::plan_stream(spec, geometry_.tensors, sizeof(T))
                                                         : std::nullopt;
    const std::optional<cuda::TileShape> tiles =
        !streams && kernel_ != Kernel::general ? cuda::plan_tiles(spec, geometry_.tensors, sizeof(T)) : std::nullopt;
    const int group_tile = streams ? streams->group_tile : tiles ? tiles->group_tile : cuda::kGroupTile;
    const int group_tiles = (spec.group + group_tile - 1) / group_tile;
    const cuda::ChunkPlan plan = cuda::plan_chunks(n, spec.cache_heads * group_tiles, max_visible, sm_count_,
                                                   streams ? stream_blocks_per_sm_ : cuda::kBlocksPerSm);
    const std::size_t partials = std::size_t(n) * std::size_t(query_heads) * std::size_t(plan.max_chunks);
    states_device_.reserve(partials);
    acc_device_.reserve(partials * std::size_t(spec.value_dim));
    out_.reserve(jobs.size() * out_row);
    out_device_.reserve(jobs.size() * out_row);

    cudaStream_t stream = stream_.get();
    upload_jobs(jobs.size(), q_row);

    const cuda::ChunkParams<T> params{view<T>(),          spec,           jobs_device_.data(),
                                      queries_device_.data(), plan.chunk_tokens, plan.max_chunks,
                                      states_device_.data(),  acc_device_.data()};
    const dim3 grid(unsigned(n), unsigned(spec.cache_heads * group_tiles), unsigned(plan.max_chunks));
    start_.record(stream_);
    if (streams) {
      if constexpr (sizeof(T) == 2 || sizeof(T) == 4) launch_stream<T>(grid, *streams, spec.value_dim, params);
    } else if (tiles) {
      const cuda::TiledParams<T> tiled{params, *tiles};
      switch (tiles->group_tile) {
        case 1: launch_tiles<T, 1>(grid, tiled); break;
        case 2: launch_tiles<T, 2>(grid, tiled); break;
        case 4: launch_tiles<T, 4>(grid, tiled); break;
        case 8: launch_tiles<T, 8>(grid, tiled); break;
        default: launch_tiles<T, 16>(grid, tiled); break;
      }
    } else {
      const std::size_t shared = std::size_t(cuda::kGroupTile) * spec.key_dim * sizeof(float);
      const int col_slots = (spec.value_dim + cuda::kThreads - 1) / cuda::kThreads;
      if (col_slots <= 1)
        launch_chunks<T, 1>(grid, shared, params);
      else if (col_slots <= 2)
        launch_chunks<T, 2>(grid, shared, params);
      else if (col_slots <= 4)
        launch_chunks<T, 4>(grid, shared, params);
      else
        launch_chunks<T, 8>(grid, shared, params);
    }
    const cuda::MergeParams merge{jobs_device_.data(), query_heads,           spec.value_dim,     plan.chunk_tokens,
                                  plan.max_chunks,     states_device_.data(), acc_device_.data(), out_device_.data(),
                                  std::int64_t(out_row)};
    cuda::merge_chunks<float><<<dim3(unsigned(n), unsigned(query_heads)), cuda::kMergeThreads, 0, stream>>>(merge);
    cuda::check_launch("merge_chunks");
    stop_.record(stream_);
    download_outputs(jobs, out_row);
  }

  /// A prefill kernel over query blocks (prefill_tiles.cuh, prefill_blocks.cuh); jobs_ and
  /// queries_ are filled.
  template <class T>
  void run_prefill(const AttendSpec& spec, std::span<const QueryJob> jobs, const cuda::PrefillPlan& plan) {
    const std::size_t q_row = std::size_t(spec.query_heads()) * spec.key_dim, out_row = std::size_t(spec.query_heads()) * spec.value_dim;
    out_.reserve(jobs.size() * out_row);
    out_device_.reserve(jobs.size() * out_row);
    upload_jobs(jobs.size(), q_row);
    run_blocks<T>(view<T>(), spec, jobs.size(), plan, queries_device_.data(), std::int64_t(q_row), out_device_.data(),
                  std::int64_t(out_row), stream_.get());
    download_outputs(jobs, out_row);
  }

  /// Launches the plan's prefill kernel (and the merge, where its tokens are split) over its
  /// blocks of the jobs on the device (jobs_device_), on `stream`, between the timing events.
  template <class T>
  void run_blocks(const cuda::DeviceCacheView<T>& cache, const AttendSpec& spec, std::size_t n_jobs, const cuda::PrefillPlan& prefill,
                  const float* queries, std::int64_t query_stride, float* out, std::int64_t out_stride, cudaStream_t stream) {
    const std::vector<cuda::QueryBlock>& blocks = prefill.blocks;
    blocks_.reserve(blocks.size());
    blocks_device_.reserve(blocks.size());
    std::memcpy(blocks_.data(), blocks.data(), blocks.size() * sizeof(cuda::QueryBlock));
    POLYATTN_CUDA_CHECK(cudaMemcpyAsync(blocks_device_.data(), blocks_.data(), blocks.size() * sizeof(cuda::QueryBlock),
                                        cudaMemcpyHostToDevice, stream));
    // Split the query blocks' tokens into chunks where blocks x heads would not fill the GPU; the
    // merge then reads each row's chunks over its query block's range.
    int longest = 0;
    for (const cuda::QueryBlock& b : blocks) longest = std::max(longest, b.key_end - b.key_first);
    const cuda::ChunkPlan plan = cuda::plan_chunks(int(blocks.size()), spec.query_heads(), longest, sm_count_, prefill_blocks_per_sm_);
    if (plan.max_chunks > 1) {
      const std::size_t partials = n_jobs * std::size_t(spec.query_heads()) * std::size_t(plan.max_chunks);
      states_device_.reserve(partials);
      acc_device_.reserve(partials * std::size_t(spec.value_dim));
      merge_jobs_.reserve(n_jobs);
      merge_jobs_device_.reserve(n_jobs);
      for (const cuda::QueryBlock& b : blocks)
        for (int r = 0; r < b.rows; ++r) merge_jobs_.data()[b.first_job + r] = {b.seq, b.key_first, std::max(b.key_first, b.key_end)};
      POLYATTN_CUDA_CHECK(cudaMemcpyAsync(merge_jobs_device_.data(), merge_jobs_.data(), n_jobs * sizeof(cuda::DeviceJob),
                                          cudaMemcpyHostToDevice, stream));
    }
    const cuda::PrefillParams<T> params{cache,      spec,        jobs_device_.data(), blocks_device_.data(), queries,
                                        query_stride, out,       out_stride,          plan.chunk_tokens,     plan.max_chunks,
                                        states_device_.data(), acc_device_.data()};
    const dim3 grid(unsigned(blocks.size()), unsigned(spec.query_heads()), unsigned(plan.max_chunks));
    start_.record(stream);
    if (prefill.kernel == cuda::PrefillKernel::tiled) {
      const std::size_t shared = cuda::tiled_prefill_shared_bytes(spec);
      switch (cuda::tiled_value_cols(spec.value_dim)) {
        case 64: launch_tiled_prefill<T, 1>(grid, shared, params, stream); break;
        case 128: launch_tiled_prefill<T, 2>(grid, shared, params, stream); break;
        default: launch_tiled_prefill<T, 4>(grid, shared, params, stream); break;
      }
    } else {
      const std::size_t shared = cuda::prefill_shared_bytes(spec);
      const int col_slots = (spec.value_dim + 31) / 32;
      if (col_slots <= 1)
        launch_prefill<T, 1>(grid, shared, params, stream);
      else if (col_slots <= 2)
        launch_prefill<T, 2>(grid, shared, params, stream);
      else if (col_slots <= 4)
        launch_prefill<T, 4>(grid, shared, params, stream);
      else
        launch_prefill<T, 8>(grid, shared, params, stream);
    }
    if (plan.max_chunks > 1) {
      const cuda::MergeParams merge{merge_jobs_device_.data(), spec.query_heads(),    spec.value_dim,    plan.chunk_tokens,
                                    plan.max_chunks,           states_device_.data(), acc_device_.data(), out,
                                    out_stride};
      cuda::merge_chunks<float><<<dim3(unsigned(n_jobs), unsigned(spec.query_heads())), cuda::kMergeThreads, 0, stream>>>(merge);
      cuda::check_launch("merge_chunks");
    }
    stop_.record(stream);
  }

  /// Copies jobs_ and queries_ (the first `n` jobs' rows of q_row floats) to the device.
  void upload_jobs(std::size_t n, std::size_t q_row) {
    POLYATTN_CUDA_CHECK(cudaMemcpyAsync(jobs_device_.data(), jobs_.data(), n * sizeof(cuda::DeviceJob), cudaMemcpyHostToDevice,
                                        stream_.get()));
    POLYATTN_CUDA_CHECK(cudaMemcpyAsync(queries_device_.data(), queries_.data(), n * q_row * sizeof(float), cudaMemcpyHostToDevice,
                                        stream_.get()));
  }

  /// Copies the outputs back, waits, and hands each job its row; records the kernels' time.
  void download_outputs(std::span<const QueryJob> jobs, std::size_t out_row) {
    POLYATTN_CUDA_CHECK(cudaMemcpyAsync(out_.data(), out_device_.data(), jobs.size() * out_row * sizeof(float), cudaMemcpyDeviceToHost,
                                        stream_.get()));
    stream_.synchronize();
    last_kernel_seconds_ = stop_.seconds_since(start_);
    for (std::size_t j = 0; j < jobs.size(); ++j) std::memcpy(jobs[j].out, out_.data() + j * out_row, out_row * sizeof(float));
  }

  /// Launches `kernel` on `stream` with `shared` bytes of dynamic shared memory.
  template <class Params>
  void launch(void (*kernel)(Params), dim3 grid, int threads, std::size_t shared, const Params& params, const char* name,
              cudaStream_t stream) {
    if (shared > 48 * 1024)  // above the default limit a kernel must opt in
      POLYATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
    kernel<<<grid, threads, shared, stream>>>(params);
    cuda::check_launch(name);
  }

  template <class T, int kColSlots>
  void launch_prefill(dim3 grid, std::size_t shared, const cuda::PrefillParams<T>& params, cudaStream_t stream) {
    launch(cuda::attend_query_blocks<T, kColSlots>, grid, cuda::kPrefillThreads, shared, params, "attend_query_blocks", stream);
  }

  template <class T, int kColVec>
  void launch_tiled_prefill(dim3 grid, std::size_t shared, const cuda::PrefillParams<T>& params, cudaStream_t stream) {
    launch(cuda::attend_query_tiles<T, kColVec>, grid, cuda::kTiledPrefillThreads, shared, params, "attend_query_tiles", stream);
  }

  template <class T, int kGroup>
  void launch_tiles(dim3 grid, const cuda::TiledParams<T>& params) {
    launch(cuda::attend_tiles<T, kGroup>, grid, cuda::kTiledThreads, params.shape.shared_bytes, params, "attend_tiles", stream_.get());
  }

  /// The streaming kernel's instance for the plan's lanes and group tile.
  template <class T>
  void launch_stream(dim3 grid, const cuda::StreamShape& shape, int value_dim, const cuda::ChunkParams<T>& params) {
    const std::size_t shared = cuda::stream_shared_bytes(shape.group_tile, value_dim);
    const auto run = [&](auto kernel) { launch(kernel, grid, cuda::kStreamThreads, shared, params, "attend_stream", stream_.get()); };
    const auto with_lanes = [&]<int kLanes>() {
      switch (shape.group_tile) {
        case 1: run(cuda::attend_stream<T, kLanes, 1>); break;
        case 2: run(cuda::attend_stream<T, kLanes, 2>); break;
        case 4: run(cuda::attend_stream<T, kLanes, 4>); break;
        default: run(cuda::attend_stream<T, kLanes, 8>); break;
      }
    };
    switch (shape.lanes) {
      case 8: with_lanes.template operator()<8>(); break;
      case 16: with_lanes.template operator()<16>(); break;
      default: with_lanes.template operator()<32>(); break;
    }
  }

  template <class T, int kColSlots>
  void launch_chunks(dim3 grid, std::size_t shared, const cuda::ChunkParams<T>& params) {
    launch(cuda::attend_chunks<T, kColSlots>, grid, cuda::kThreads, shared, params, "attend_chunks", stream_.get());
  }

  int device_ = 0;
  int sm_count_ = 1;
  std::size_t max_shared_bytes_ = 48 << 10;  // dynamic shared memory one block may opt in to
  Kernel kernel_ = Kernel::automatic;
  int prefill_blocks_per_sm_ = cuda::kBlocksPerSm;
  int stream_blocks_per_sm_ = cuda::kStreamBlocksPerSm;
  cuda::Stream stream_;
  cuda::Event start_, stop_;
  double last_kernel_seconds_ = 0;
  std::uint64_t rows_uploaded_ = 0;

  // The mirror: one buffer per cached tensor, laid out like the host store, and the page table.
  const void* bound_ = nullptr;
  cuda::DeviceGeometry geometry_;
  cuda::MirrorTracker tracker_;
  std::vector<cuda::DeviceBuffer<std::byte>> tensors_;
  cuda::DeviceBuffer<int> page_table_;

  // Staging for cache rows, and per-call buffers (grown, never shrunk).
  cuda::PinnedBuffer<std::byte> staging_;
  cuda::DeviceBuffer<std::byte> staging_device_;
  cuda::PinnedBuffer<cuda::StagedRow> staged_rows_;
  cuda::DeviceBuffer<cuda::StagedRow> staged_rows_device_;
  cuda::PinnedBuffer<cuda::DeviceJob> jobs_;
  cuda::DeviceBuffer<cuda::DeviceJob> jobs_device_;
  cuda::PinnedBuffer<cuda::QueryBlock> blocks_;
  cuda::DeviceBuffer<cuda::QueryBlock> blocks_device_;
  cuda::PinnedBuffer<cuda::DeviceJob> merge_jobs_;  // a prefill row with its query block's range
  cuda::DeviceBuffer<cuda::DeviceJob> merge_jobs_device_;
  cuda::PinnedBuffer<float> queries_, out_;
  cuda::DeviceBuffer<float> queries_device_, out_device_, acc_device_;
  cuda::DeviceBuffer<SoftmaxState<float>> states_device_;
};

}  // namespace polyattn::exec
