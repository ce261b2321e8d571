// The cases of an A/B comparison of the CPU decode kernels between two commits: one decode step
// of Attention<V, L, exec::CpuSimd, T> over a filled cache (6 heads of 64: Whisper tiny; 2 MiB
// pages where Linux gives them). ab_headers.sh compiles this file once against each commit's
// headers into a shared object of its own (hidden symbols: each keeps its own instances of the
// library's templates), and ab_main.cpp loads both and calls their steps alternately.
//   a case's name: variant_type_layout, e.g. xc_f32_hnd
//   variants mha gqa2 mqa slim xc; types f32 f16 bf16 i8; layouts hnd nhd pg16
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <polyattn/polyattn.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "../kernels/support/filled_decode.hpp"

namespace {

using namespace polyattn;

/// A filled cache and its step, behind a type-erased call.
struct Case {
  std::function<double()> step;  // one attend, returns the outputs' sum
};

template <class V, class Layout, class T>
Case make_case(int length, int batch) {
  auto s = std::make_shared<bench::FilledDecode<V, Layout, T>>(length, batch);
  s->attn->attend(s->seqs, s->q, s->out);  // the first step after the fill is slower (decode_step.hpp)
  return {[s] {
    s->attn->attend(s->seqs, s->q, s->out);
    return double(s->out.sum());
  }};
}

template <class V, class T>
Case by_layout(const std::string& layout, int length, int batch) {
  if (layout == "hnd") return make_case<V, Hnd, T>(length, batch);
  if (layout == "nhd") return make_case<V, Nhd, T>(length, batch);
  if (layout == "pg16") return make_case<V, Paged<16>, T>(length, batch);
  std::fprintf(stderr, "unknown layout %s\n", layout.c_str());
  std::exit(2);
}

template <class V>
Case by_type(const std::string& type, const std::string& layout, int length, int batch) {
  if (type == "f32") return by_layout<V, float>(layout, length, batch);
  if (type == "f16") return by_layout<V, Eigen::half>(layout, length, batch);
  if (type == "bf16") return by_layout<V, Eigen::bfloat16>(layout, length, batch);
  if (type == "i8") return by_layout<V, std::int8_t>(layout, length, batch);
  std::fprintf(stderr, "unknown type %s\n", type.c_str());
  std::exit(2);
}

Case parse(const std::string& name, int length, int batch) {
  const auto a = name.find('_'), b = name.rfind('_');
  if (a == std::string::npos || a == b) {
    std::fprintf(stderr, "a case is variant_type_layout: %s\n", name.c_str());
    std::exit(2);
  }
  const std::string variant = name.substr(0, a), type = name.substr(a + 1, b - a - 1), layout = name.substr(b + 1);
  if (variant == "mha") return by_type<Mha>(type, layout, length, batch);
  if (variant == "gqa2") return by_type<Gqa<2>>(type, layout, length, batch);
  if (variant == "mqa") return by_type<Mqa>(type, layout, length, batch);
  if (variant == "slim") return by_type<SlimK2>(type, layout, length, batch);
  if (variant == "xc") return by_type<XCache>(type, layout, length, batch);
  std::fprintf(stderr, "unknown variant %s\n", variant.c_str());
  std::exit(2);
}

}  // namespace

// What ab_main.cpp calls (the only symbols the object exports).
extern "C" [[gnu::visibility("default")]] void* ab_make_case(const char* name, int length, int batch) {
  return new Case(parse(name, length, batch));
}
extern "C" [[gnu::visibility("default")]] double ab_step(void* c) { return static_cast<Case*>(c)->step(); }
