// Mixed-radix complex FFT for the sizes the audio front end needs (Whisper: n = 400 =
// 4*4*5*5, not a power of two). Decimation in time, recursive, with precomputed twiddles;
// radix 2, 4 and 5 have dedicated butterflies, any other prime factor uses a generic one
// (O(n * p) for that stage), so every n works and small-prime n are fast.
#pragma once

#include <cmath>
#include <complex>
#include <cstddef>
#include <numbers>
#include <string>
#include <vector>

#include "error.hpp"

namespace polyattn::whisper {

class Fft {
 public:
  using Complex = std::complex<double>;

  explicit Fft(std::size_t n) : n_(n) {
    if (n == 0 || n > (1u << 24)) throw UnsupportedError("Fft: size " + std::to_string(n) + " is not in [1, 2^24]");
    twiddles_.resize(n);
    for (std::size_t k = 0; k < n; ++k)
      twiddles_[k] = std::polar(1.0, -2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n));
    // factors_ holds (radix, remaining length) pairs: 4s first, then 2, then odd primes.
    std::size_t rest = n, p = 4;
    while (rest > 1) {
      while (rest % p != 0) {
        p = p == 4 ? 2 : p == 2 ? 3 : p + 2;
        if (p * p > rest) p = rest;
      }
      rest /= p;
      factors_.push_back(p);
      factors_.push_back(rest);
    }
    if (n == 1) factors_ = {1, 1};
  }

  std::size_t size() const { return n_; }

  // out[k] = sum_j in[j] exp(-2 pi i j k / n). in and out must not alias; both have size().
  void forward(const Complex* in, Complex* out) const { work(out, in, 1, factors_.data()); }

 private:
  void work(Complex* out, const Complex* in, std::size_t fstride, const std::size_t* factors) const {
    const std::size_t p = factors[0], m = factors[1];
    if (m == 1) {
      for (std::size_t q = 0; q < p; ++q) out[q] = in[q * fstride];
    } else {
      // p interleaved sub-sequences of length m, each transformed into its own block.
      for (std::size_t q = 0; q < p; ++q) work(out + q * m, in + q * fstride, fstride * p, factors + 2);
    }
    switch (p) {
      case 1: break;
      case 2: butterfly2(out, fstride, m); break;
      case 4: butterfly4(out, fstride, m); break;
      case 5: butterfly5(out, fstride, m); break;
      default: butterfly_generic(out, fstride, p, m); break;
    }
  }

  // Plain complex product: std::complex's operator* calls __muldc3 for C99 inf/NaN rules,
  // several times slower, and FFT inputs here are finite.
  static Complex mul(const Complex& a, const Complex& b) {
    return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
  }

  void butterfly2(Complex* f, std::size_t fstride, std::size_t m) const {
    for (std::size_t j = 0; j < m; ++j) {
      const Complex t = mul(f[j + m], twiddles_[j * fstride]);
      f[j + m] = f[j] - t;
      f[j] += t;
    }
  }

  void butterfly4(Complex* f, std::size_t fstride, std::size_t m) const {
    for (std::size_t j = 0; j < m; ++j) {
      const Complex a0 = f[j];
      const Complex a1 = mul(f[j + m], twiddles_[j * fstride]);
      const Complex a2 = mul(f[j + 2 * m], twiddles_[2 * j * fstride]);
      const Complex a3 = mul(f[j + 3 * m], twiddles_[3 * j * fstride]);
      const Complex b0 = a0 + a2, b1 = a0 - a2, b2 = a1 + a3, b3 = a1 - a3;
      const Complex minus_i_b3(b3.imag(), -b3.real());
      f[j] = b0 + b2;
      f[j + 2 * m] = b0 - b2;
      f[j + m] = b1 + minus_i_b3;
      f[j + 3 * m] = b1 - minus_i_b3;
    }
  }

  void butterfly5(Complex* f, std::size_t fstride, std::size_t m) const {
    // ya = w, yb = w^2 with w = exp(-2 pi i / 5); w^3 = conj(yb), w^4 = conj(ya).
    const Complex ya = twiddles_[fstride * m], yb = twiddles_[2 * fstride * m];
    for (std::size_t u = 0; u < m; ++u) {
      const Complex s0 = f[u];
      const Complex s1 = mul(f[u + m], twiddles_[u * fstride]);
      const Complex s2 = mul(f[u + 2 * m], twiddles_[2 * u * fstride]);
      const Complex s3 = mul(f[u + 3 * m], twiddles_[3 * u * fstride]);
      const Complex s4 = mul(f[u + 4 * m], twiddles_[4 * u * fstride]);
      const Complex s7 = s1 + s4, s10 = s1 - s4, s8 = s2 + s3, s9 = s2 - s3;
      f[u] = s0 + s7 + s8;
      const Complex s5(s0.real() + s7.real() * ya.real() + s8.real() * yb.real(),
                       s0.imag() + s7.imag() * ya.real() + s8.imag() * yb.real());
      const Complex s6(s10.imag() * ya.imag() + s9.imag() * yb.imag(),
                       -(s10.real() * ya.imag() + s9.real() * yb.imag()));
      f[u + m] = s5 - s6;
      f[u + 4 * m] = s5 + s6;
      const Complex s11(s0.real() + s7.real() * yb.real() + s8.real() * ya.real(),
                        s0.imag() + s7.imag() * yb.real() + s8.imag() * ya.real());
      const Complex s12(-s10.imag() * yb.imag() + s9.imag() * ya.imag(),
                        s10.real() * yb.imag() - s9.real() * ya.imag());
      f[u + 2 * m] = s11 + s12;
      f[u + 3 * m] = s11 - s12;
    }
  }

  void butterfly_generic(Complex* f, std::size_t fstride, std::size_t p, std::size_t m) const {
    // Radices here are small primes; keep their scratch off the heap (this runs per frame).
    Complex stack[32];
    std::vector<Complex> heap(p > 32 ? p : 0);
    Complex* scratch = p > 32 ? heap.data() : stack;
    for (std::size_t u = 0; u < m; ++u) {
      for (std::size_t q = 0; q < p; ++q) scratch[q] = f[u + q * m];
      for (std::size_t q1 = 0; q1 < p; ++q1) {
        const std::size_t k = u + q1 * m;
        std::size_t tw = 0;
        Complex acc = scratch[0];
        for (std::size_t q = 1; q < p; ++q) {
          tw += fstride * k;
          tw %= n_;
          acc += mul(scratch[q], twiddles_[tw]);
        }
        f[k] = acc;
      }
    }
  }

  std::size_t n_;
  std::vector<Complex> twiddles_;
  std::vector<std::size_t> factors_;
};

}  // namespace polyattn::whisper
