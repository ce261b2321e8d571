// The CPU kernels' softmax exp (exec/cpu/softmax_exp.hpp) against xsimd::exp, bit for bit, on
// the AVX2 kernels and, where the build has them, the AVX-512 ones.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <polyattn/exec/cpu/attend_block.hpp>
#include <polyattn/exec/cpu/softmax_exp.hpp>

namespace {

/// The exponents to check: the specials, the edges of the range where 2^k is a normal power of
/// two (k = -126, from x = -126.5 ln 2) and of xsimd's own cut-off (minlog, -88.376), a band of
/// consecutive floats around each, and 2^14 evenly spaced floats of every binade from 2^-40 to
/// 2^6 (so up to -128): about 800k values. Then the positive exponents fused tiles take (a score
/// above a stale running max, attend_block.hpp): every binade from 2^-40 to 2^5, and 64.
std::vector<float> exponents() {
  std::vector<float> x{-0.0f, 0.0f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                       -std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::min(), -104.0f, -1.0f};
  for (const float edge : {-126.5f * 0.693147180559945309f, -88.3762626647949f, -87.0f, -0.5f * 0.693147180559945309f}) {
    float v = edge;
    for (int i = 0; i < 4096; ++i) v = std::nextafter(v, 0.0f);
    for (int i = 0; i < 8192; ++i, v = std::nextafter(v, -200.0f)) x.push_back(v);
  }
  for (int e = -40; e <= 6; ++e) {
    const std::uint32_t first = std::bit_cast<std::uint32_t>(-std::ldexp(1.0f, e));
    for (std::uint32_t m = 0; m < (1u << 23); m += 1u << 9) x.push_back(std::bit_cast<float>(first + m));
  }
  static_assert(polyattn::exec::cpu::kFusedLimit == 64.0f);
  x.push_back(64.0f);
  for (int e = -40; e <= 5; ++e) {
    const std::uint32_t first = std::bit_cast<std::uint32_t>(std::ldexp(1.0f, e));
    for (std::uint32_t m = 0; m < (1u << 23); m += 1u << 9) x.push_back(std::bit_cast<float>(first + m));
  }
  return x;
}

template <class Arch>
void check_against_xsimd() {
  using B = xsimd::batch<float, Arch>;
  constexpr std::size_t W = B::size;
  std::vector<float> x = exponents();
  x.resize((x.size() + W - 1) / W * W, -1.0f);
  std::size_t differing = 0, zeros = 0, denormals = 0;
  float first_bad = 0.0f;
  for (std::size_t i = 0; i < x.size(); i += W) {
    alignas(64) float ours[W], theirs[W];
    const B in = B::load_unaligned(x.data() + i);
    polyattn::exec::cpu::softmax_exp<Arch>(in).store_aligned(ours);
    xsimd::exp(in).store_aligned(theirs);
    for (std::size_t l = 0; l < W; ++l) {
      const bool same = std::memcmp(&ours[l], &theirs[l], sizeof(float)) == 0 || (std::isnan(ours[l]) && std::isnan(theirs[l]));
      if (!same && differing++ == 0) first_bad = x[i + l];
      zeros += ours[l] == 0.0f;
      denormals += std::fpclassify(ours[l]) == FP_SUBNORMAL;
    }
  }
  INFO("first differing exponent: ", first_bad);
  CHECK(differing == 0);
  // The set reaches both ends: weights that underflow to 0, and (from the k = -126 band) the
  // denormal products xsimd gives too.
  CHECK(zeros > 0);
  CHECK(denormals > 0);
  alignas(64) float special[W];
  polyattn::exec::cpu::softmax_exp<Arch>(B(-std::numeric_limits<float>::infinity())).store_aligned(special);
  CHECK(special[0] == 0.0f);
  polyattn::exec::cpu::softmax_exp<Arch>(B(std::numeric_limits<float>::quiet_NaN())).store_aligned(special);
  CHECK(std::isnan(special[0]));
  polyattn::exec::cpu::softmax_exp<Arch>(B(0.0f)).store_aligned(special);
  CHECK(special[0] == 1.0f);
}

}  // namespace

TEST_CASE("the softmax exp equals xsimd::exp bit for bit on x <= 64, -inf and NaN") {
#if defined(__AVX2__) && defined(__FMA__)
  SUBCASE("AVX2") { check_against_xsimd<xsimd::fma3<xsimd::avx2>>(); }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
  SUBCASE("AVX-512") { check_against_xsimd<xsimd::avx512bw>(); }
#endif
  // A build for neither of those (another ISA) checks its own.
  if constexpr (!std::is_same_v<xsimd::default_arch, xsimd::avx512bw> && !std::is_same_v<xsimd::default_arch, xsimd::fma3<xsimd::avx2>>)
    SUBCASE("the build's default architecture") { check_against_xsimd<xsimd::default_arch>(); }
}
