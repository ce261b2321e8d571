// The decoder policy combinations this example instantiates, and the one place where the
// --self / --cross names become a DecoderPolicies type. To add a variant: write its Kind
// (self_variants.hpp) or use another CrossAttention option (cross_attention.hpp), add the
// combinations to DecoderCombinations; the CLI, the error messages and the tests follow the list.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/dispatch.hpp>  // TypeList

#include "cross_attention.hpp"
#include "decoder.hpp"
#include "error.hpp"
#include "self_attention.hpp"
#include "self_variants.hpp"

namespace polyattn::whisper {

template <class Kind, class Layout = Nhd>
using Self = SelfAttention<Kind, Layout>;
template <class Option>
using Cross = CrossCacheAttention<Option>;

using DefaultPolicies = DecoderPolicies<Self<self_kind::Mha>, Cross<cross::Baseline>>;

// Every self-attention kind with the baseline cross cache, every cross option with MHA self-
// attention, and the two smallest exact caches together. Exact: mha, slimk, xcache and every
// cross option (equal up to float rounding); mla<R> approximates below full rank (384 for tiny.en).
namespace combination {
using MhaPaged = DecoderPolicies<Self<self_kind::Mha, Paged<16>>, Cross<cross::Baseline>>;
using SlimK = DecoderPolicies<Self<self_kind::SlimK>, Cross<cross::Baseline>>;
using XCache = DecoderPolicies<Self<self_kind::XCache>, Cross<cross::Baseline>>;
using Mla96 = DecoderPolicies<Self<self_kind::Mla<96>>, Cross<cross::Baseline>>;
using Mla192 = DecoderPolicies<Self<self_kind::Mla<192>>, Cross<cross::Baseline>>;
using Mla384 = DecoderPolicies<Self<self_kind::Mla<384>>, Cross<cross::Baseline>>;
using KOnly = DecoderPolicies<Self<self_kind::Mha>, Cross<cross::KOnly>>;
using SharedE = DecoderPolicies<Self<self_kind::Mha>, Cross<cross::SharedE>>;
using Hybrid = DecoderPolicies<Self<self_kind::Mha>, Cross<cross::Hybrid>>;
using SlimKSharedE = DecoderPolicies<Self<self_kind::SlimK>, Cross<cross::SharedE>>;
using XCacheSharedE = DecoderPolicies<Self<self_kind::XCache>, Cross<cross::SharedE>>;
}  // namespace combination

// The list as a macro, X(type) per combination, for what a TypeList cannot spell: the explicit
// instantiations of transcribe_cpu.cpp. DecoderCombinations is built from it.
#define POLYATTN_WHISPER_DECODER_COMBINATIONS(X)                                                                 \
  X(::polyattn::whisper::DefaultPolicies) X(::polyattn::whisper::combination::MhaPaged)                          \
  X(::polyattn::whisper::combination::SlimK) X(::polyattn::whisper::combination::XCache)                        \
  X(::polyattn::whisper::combination::Mla96) X(::polyattn::whisper::combination::Mla192)                        \
  X(::polyattn::whisper::combination::Mla384) X(::polyattn::whisper::combination::KOnly)                        \
  X(::polyattn::whisper::combination::SharedE) X(::polyattn::whisper::combination::Hybrid)                      \
  X(::polyattn::whisper::combination::SlimKSharedE) X(::polyattn::whisper::combination::XCacheSharedE)

// Every combination's Decoder is compiled once, in transcribe_cpu.cpp; the translation units that
// include this header link it instead of compiling it again (decoder.hpp keeps the members that
// instantiate the policies out of the class body, where `extern template` applies to them).
#define POLYATTN_WHISPER_EXTERN_DECODER(P) extern template class Decoder<P>;
POLYATTN_WHISPER_DECODER_COMBINATIONS(POLYATTN_WHISPER_EXTERN_DECODER)
#undef POLYATTN_WHISPER_EXTERN_DECODER

namespace detail {
template <class Void, class... Ps>  // Void: the leading comma of the macro's ", P" items
using combination_list = TypeList<Ps...>;
}  // namespace detail

#define POLYATTN_WHISPER_COMBINATION_ITEM(P) , P
using DecoderCombinations = detail::combination_list<void POLYATTN_WHISPER_DECODER_COMBINATIONS(POLYATTN_WHISPER_COMBINATION_ITEM)>;
#undef POLYATTN_WHISPER_COMBINATION_ITEM

// Whether a combination is exact (the same tokens as MHA up to float rounding).
template <class P>
constexpr bool is_exact_policy = !requires { P::self_policy::kind::variant::rank; };

using PolicyPair = std::pair<std::string, std::string>;  // (--self name, --cross name)

// The instantiated (--self, --cross) name pairs, in DecoderCombinations order.
template <class Combinations = DecoderCombinations>
std::vector<PolicyPair> policy_pairs() {
  return []<class... Ps>(TypeList<Ps...>) {
    return std::vector<PolicyPair>{{Ps::self_policy::name(), Ps::cross_policy::name()}...};
  }(Combinations{});
}

namespace detail {

// The distinct values of one side of `pairs` (&PolicyPair::first: self names), in first-seen order.
inline std::vector<std::string> distinct_names(const std::vector<PolicyPair>& pairs, std::string PolicyPair::*side) {
  std::vector<std::string> names;
  for (const PolicyPair& p : pairs)
    if (std::find(names.begin(), names.end(), p.*side) == names.end()) names.push_back(p.*side);
  return names;
}

inline std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace detail

// "--self mha/nhd --cross baseline, ..." for help texts and errors.
template <class Combinations = DecoderCombinations>
std::string available_policies() {
  return []<class... Ps>(TypeList<Ps...>) { return detail::joined({Ps::name()...}); }(Combinations{});
}

// Calls f(std::type_identity<DecoderPolicies<...>>{}) for the combination named by `self` and
// `cross`; anything not in Combinations is an UnsupportedError that lists what is available.
template <class Combinations = DecoderCombinations, class F>
void dispatch_policies(const std::string& self, const std::string& cross, F&& f) {
  const std::vector<PolicyPair> pairs = policy_pairs<Combinations>();
  const std::vector<std::string> selfs = detail::distinct_names(pairs, &PolicyPair::first),
                                 crosses = detail::distinct_names(pairs, &PolicyPair::second);
  if (std::find(selfs.begin(), selfs.end(), self) == selfs.end())
    throw UnsupportedError("--self '" + self + "' is not an instantiated self-attention policy; available: " +
                           detail::joined(selfs));
  if (std::find(crosses.begin(), crosses.end(), cross) == crosses.end())
    throw UnsupportedError("--cross '" + cross + "' is not an instantiated cross-attention policy; available: " +
                           detail::joined(crosses));
  const bool found = polyattn::detail::find_type(
      Combinations{},
      [&]<class P>(std::type_identity<P>) { return P::self_policy::name() == self && P::cross_policy::name() == cross; },
      [&]<class P>(std::type_identity<P>) { f(std::type_identity<P>{}); });
  if (!found)
    throw UnsupportedError("--self " + self + " with --cross " + cross + " is not instantiated; available: " +
                           available_policies<Combinations>());
}

}  // namespace polyattn::whisper
