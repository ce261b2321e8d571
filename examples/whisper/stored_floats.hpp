// A float tensor's elements in the precision its model file stores them in: float32, float16 or
// bfloat16. The loaders keep a tensor's elements so until the weights take them, so that a
// float16 model (tiny.en ships one) occupies its file's bytes while it loads, not twice them, and
// a weight that stays float16 (weight_matrix.hpp) is copied, never converted.
//   StoredFloats s = StoredFloats::from_bytes(p, n, StoredFloats::Precision::float16);
//   s.size();                 // n elements
//   s.to_float(out);          // out[0, n) in float: exact, every 16-bit value is a float
//   s.halfs();                // the float16 elements themselves (float16 only)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <variant>
#include <vector>

#include <Eigen/Core>  // Eigen::half, Eigen::bfloat16

#include "error.hpp"

namespace polyattn::whisper {

class StoredFloats {
 public:
  enum class Precision { float32, float16, bfloat16 };

  StoredFloats() = default;

  /// `n` little-endian elements of `precision` at `bytes` (n * element_bytes(precision) bytes,
  /// which the caller has checked are there).
  static StoredFloats from_bytes(const std::uint8_t* bytes, std::size_t n, Precision precision) {
    StoredFloats s;
    switch (precision) {
      case Precision::float32: s.elements_ = copied<float>(bytes, n); break;
      case Precision::float16: s.elements_ = copied<Eigen::half>(bytes, n); break;
      case Precision::bfloat16: s.elements_ = copied<Eigen::bfloat16>(bytes, n); break;
    }
    return s;
  }

  /// Elements already in float (a test's or a converter's values).
  static StoredFloats from_floats(std::vector<float> values) {
    StoredFloats s;
    s.elements_ = std::move(values);
    return s;
  }

  static constexpr std::size_t element_bytes(Precision p) { return p == Precision::float32 ? 4 : 2; }

  Precision precision() const { return static_cast<Precision>(elements_.index()); }
  std::size_t size() const {
    return std::visit([](const auto& v) { return v.size(); }, elements_);
  }

  /// out[0, size()) = the elements as float; every float16 and bfloat16 value is a float, so
  /// this is exact. Eigen's casts use F16C / AVX-512 conversions where the build enables them.
  void to_float(float* out) const {
    std::visit(
        [&](const auto& v) {
          using T = typename std::decay_t<decltype(v)>::value_type;
          const auto n = static_cast<Eigen::Index>(v.size());
          Eigen::Map<Eigen::ArrayXf>(out, n) = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(v.data(), n).template cast<float>();
        },
        elements_);
  }
  std::vector<float> to_float() const {
    std::vector<float> out(size());
    to_float(out.data());
    return out;
  }

  /// The float16 elements (precision() must be float16).
  std::span<const Eigen::half> halfs() const {
    const auto* h = std::get_if<std::vector<Eigen::half>>(&elements_);
    if (!h) throw Error("stored floats: the elements are not float16");
    return *h;
  }

 private:
  template <class T>
  static std::vector<T> copied(const std::uint8_t* bytes, std::size_t n) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 2);
    std::vector<T> v(n);
    if (n) std::memcpy(static_cast<void*>(v.data()), bytes, n * sizeof(T));  // the file is little-endian, as is every target
    return v;
  }

  // The alternatives in Precision's order.
  std::variant<std::vector<float>, std::vector<Eigen::half>, std::vector<Eigen::bfloat16>> elements_;
};

}  // namespace polyattn::whisper
