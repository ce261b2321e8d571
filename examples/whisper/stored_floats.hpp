// A float tensor's elements in the precision its model file stores them in: float32, float16 or
// bfloat16. The loaders keep a tensor's elements so until the weights take them, so that a
// float16 weight that stays float16 (weight_matrix.hpp) is copied, never converted.
//   StoredFloats s = StoredFloats::from_bytes(p, n, StoredFloats::Precision::float16);  // a copy
//   StoredFloats v = StoredFloats::view(file, p, n, StoredFloats::Precision::float16);  // no copy
//   s.size();                 // n elements
//   s.to_float(out);          // out[0, n) in float: exact, every 16-bit value is a float
//   s.copy_halfs(out);        // the float16 elements themselves (float16 only)
//
// A view reads its elements where they lie in a mapped model file (mapped_file.hpp), and when
// the last StoredFloats holding them goes (the weights took them), their pages leave the
// resident set. The elements need not be aligned in the file (CTranslate2's are not), so they
// are only ever read by memcpy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include <Eigen/Core>  // Eigen::half, Eigen::bfloat16

#include "error.hpp"
#include "half_to_float.hpp"
#include "mapped_file.hpp"

namespace polyattn::whisper {

class StoredFloats {
 public:
  enum class Precision { float32, float16, bfloat16 };

  StoredFloats() = default;

  /// A copy of `n` little-endian elements of `precision` at `bytes` (n * element_bytes(precision)
  /// bytes, which the caller has checked are there).
  static StoredFloats from_bytes(const std::uint8_t* bytes, std::size_t n, Precision precision) {
    auto copy = std::make_shared<std::vector<std::uint8_t>>(bytes, bytes + n * element_bytes(precision));
    return StoredFloats(std::shared_ptr<const std::uint8_t>(copy, copy->data()), n, precision);
  }

  /// The same elements read in place from `file`, which the view keeps mapped; `bytes` lies in
  /// file->bytes() (checked by the caller). The last copy of the view releases their pages.
  static StoredFloats view(std::shared_ptr<const MappedFile> file, const std::uint8_t* bytes, std::size_t n, Precision precision) {
    const std::size_t n_bytes = n * element_bytes(precision);
    return StoredFloats(std::shared_ptr<const std::uint8_t>(bytes, [file = std::move(file), n_bytes](const std::uint8_t* p) {
                          file->release(p, n_bytes);
                        }),
                        n, precision);
  }

  /// A view when `file` is the mapping `bytes` lies in, a copy when it is empty (a parser's choice).
  static StoredFloats view_or_copy(const std::shared_ptr<const MappedFile>& file, const std::uint8_t* bytes, std::size_t n,
                                   Precision precision) {
    return file ? view(file, bytes, n, precision) : from_bytes(bytes, n, precision);
  }

  /// Elements already in float (a test's or a converter's values).
  static StoredFloats from_floats(const std::vector<float>& values) {
    return from_bytes(reinterpret_cast<const std::uint8_t*>(values.data()), values.size(), Precision::float32);
  }

  static constexpr std::size_t element_bytes(Precision p) { return p == Precision::float32 ? 4 : 2; }

  Precision precision() const { return precision_; }
  std::size_t size() const { return size_; }

  /// out[0, size()) = the elements as float; every float16 and bfloat16 value is a float, so
  /// this is exact. Eigen's casts use F16C / AVX-512 conversions where the build enables them.
  void to_float(float* out) const {
    switch (precision_) {
      case Precision::float32:
        if (size_) std::memcpy(out, bytes_.get(), size_ * sizeof(float));  // the file is little-endian, as is every target
        break;
      case Precision::float16: convert_16bit<Eigen::half>(out); break;
      case Precision::bfloat16: convert_16bit<Eigen::bfloat16>(out); break;
    }
  }
  std::vector<float> to_float() const {
    std::vector<float> out(size());
    to_float(out.data());
    return out;
  }

  /// out[0, size()) = the float16 elements (precision() must be float16).
  void copy_halfs(Eigen::half* out) const {
    if (precision_ != Precision::float16) throw Error("stored floats: the elements are not float16");
    if (size_) std::memcpy(static_cast<void*>(out), bytes_.get(), size_ * sizeof(Eigen::half));
  }

 private:
  StoredFloats(std::shared_ptr<const std::uint8_t> bytes, std::size_t n, Precision precision)
      : bytes_(std::move(bytes)), size_(n), precision_(precision) {}

  // Through an aligned block on the stack: the elements may sit at any byte offset.
  template <class T>
  void convert_16bit(float* out) const {
    constexpr std::size_t kBlock = 4096;
    alignas(64) T block[kBlock];
    for (std::size_t first = 0; first < size_; first += kBlock) {
      const std::size_t n = std::min(kBlock, size_ - first);
      std::memcpy(static_cast<void*>(block), bytes_.get() + first * sizeof(T), n * sizeof(T));
      const auto count = static_cast<Eigen::Index>(n);
      if constexpr (std::is_same_v<T, Eigen::half>)
        half_to_float(block, count, out + first);
      else
        Eigen::Map<Eigen::ArrayXf>(out + first, count) = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(block, count).template cast<float>();
    }
  }

  std::shared_ptr<const std::uint8_t> bytes_;  // little-endian elements, shared by copies (never written)
  std::size_t size_ = 0;
  Precision precision_ = Precision::float32;
};

}  // namespace polyattn::whisper
