// exp for the online softmax: the exponents it takes are scores less a running maximum, never
// positive (or, on fused tiles, at most kFusedLimit = 64: attend_block.hpp), so xsimd::exp's
// overflow branch (from 88.4) is dead weight there, and on AVX-512 the scaling by
// 2^k is one instruction (vscalefps) instead of xsimd's integer exponent arithmetic
// (convert, add, shift, multiply). The reduction and the polynomial are xsimd's own (Cody-Waite
// with ln 2 split in two, then 1 + r + r^2 P(r)), so the result is xsimd::exp's, bit for bit,
// for every x <= 64, -inf and NaN (tests/test_softmax_exp.cpp checks about 1.5M of them, dense
// around the edges where 2^k underflows).
// Results xsimd flushes to 0 (2^k below 2^-126) are flushed here too, so no denormal weight
// ever slows the products that follow.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace polyattn::exec::cpu {

/// A float constant given by its bits, as xsimd gives its own (a decimal may not round-trip).
template <class B>
inline B float_bits(std::uint32_t bits) {
  return B(std::bit_cast<float>(bits));
}

/// exp(x), lane by lane, for x <= 64 (and -inf: 0; NaN: NaN), equal to xsimd::exp(x). Always
/// inlined: attend_block calls it in four places, and GCC 12 then left it out of line in some
/// translation units (a call per vector, and -Wuninitialized on _mm512_undefined_ps in its body).
template <class Arch>
[[gnu::always_inline]] inline xsimd::batch<float, Arch> softmax_exp(const xsimd::batch<float, Arch>& x) {
  using B = xsimd::batch<float, Arch>;
  // x = k ln 2 + r, |r| <= ln 2 / 2; ln 2 = log_2hi + log_2lo, log_2hi exact in 8 bits, so k
  // log_2hi is exact and r carries no cancellation error.
  const B k = xsimd::nearbyint(float_bits<B>(0x3fb8aa3b) * x);  // 1 / ln 2
  B r = xsimd::fnma(k, float_bits<B>(0x3f318000), x);        // ln 2's high part
  r = xsimd::fnma(k, float_bits<B>(0xb95e8083), r);          // and its low part
  // e^r = 1 + r + r^2 P(r), P of degree 4 by Horner's rule, from its highest coefficient.
  B p = xsimd::fma(r, float_bits<B>(0x3ab778cf), float_bits<B>(0x3c098d8b));
  p = xsimd::fma(r, p, float_bits<B>(0x3d2aa957));
  p = xsimd::fma(r, p, float_bits<B>(0x3e2aa9a5));
  p = xsimd::fma(r, p, float_bits<B>(0x3f000000));
  p = xsimd::fma(p, r * r, r) + B(1.0f);
  // 2^k for k >= -126 (a normal power of two); below, the weight is 0, as xsimd gives it (its
  // ldexp builds 2^k from the exponent bits, which hold 0 for k = -127). -inf lands there too.
  const auto underflow = k < B(-126.5f);
  B scaled;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    scaled = B(_mm512_scalef_ps(p, k));
  } else
#endif
  {
    const auto bits = (xsimd::to_int(k) + 127) << 23;
    scaled = p * xsimd::bitwise_cast<B>(bits);
  }
  return xsimd::select(underflow, B(0.0f), scaled);
}

}  // namespace polyattn::exec::cpu
