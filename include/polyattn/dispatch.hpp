// The one place a runtime choice (say, a command-line flag) becomes compile-time policy types.
// It walks fixed lists of instantiated policies and calls `f(std::type_identity<Attention<...>>{})`
// for the match; anything not in the lists is a clear error naming what is available.
// Callers may pass their own lists (e.g. to add a variant) through the template parameters.
#pragma once

#include <string>
#include <type_traits>

#include "polyattn/attention.hpp"
#include "polyattn/cache/contiguous.hpp"
#include "polyattn/cache/paged.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/exec/cpu/cpu_simd.hpp"
#include "polyattn/exec/reference/reference.hpp"
#include "polyattn/variants/mha_gqa.hpp"

namespace polyattn {

template <class... Ts>
struct TypeList {};

using DefaultVariants = TypeList<Mha, Mqa, Gqa<2>, Gqa<4>, Gqa<8>>;
using DefaultLayouts = TypeList<Nhd, Hnd, Paged<16>>;
using DefaultExecutors = TypeList<exec::Reference, exec::CpuSimd>;

/// A policy named at run time. `variant` is "mha", "mqa" or "gqa" (then `group_size` picks
/// Gqa<G>); `layout` and `executor` are the policies' name() ("nhd", "hnd", "paged16"; "cpu",
/// "reference").
struct PolicyChoice {
  std::string variant = "mha";
  int group_size = 1;
  std::string layout = "nhd";
  std::string executor = "cpu";
};

namespace detail {

template <class V>
bool variant_matches(const PolicyChoice& c) {
  if constexpr (requires { V::group_size; })
    return c.variant == "gqa" ? c.group_size == V::group_size : c.variant == V::name();
  else
    return c.variant == V::name();
}

template <class... Ts>
std::string names(TypeList<Ts...>) {
  std::string out;
  ((out += (out.empty() ? "" : ", ") + Ts::name()), ...);
  return out;
}

/// Calls f(std::type_identity<X>{}) for the first X in the list with pred(X); false if none.
template <class... Ts, class Pred, class F>
bool find_type(TypeList<Ts...>, Pred&& pred, F&& f) {
  return ((pred(std::type_identity<Ts>{}) ? (f(std::type_identity<Ts>{}), true) : false) || ...);
}

}  // namespace detail

template <class T = float, class Variants = DefaultVariants, class Layouts = DefaultLayouts,
          class Executors = DefaultExecutors, class F>
void dispatch(const PolicyChoice& choice, F&& f) {
  const bool found = detail::find_type(
      Variants{}, [&]<class V>(std::type_identity<V>) { return detail::variant_matches<V>(choice); },
      [&]<class V>(std::type_identity<V>) {
        const bool layout_found = detail::find_type(
            Layouts{}, [&]<class L>(std::type_identity<L>) { return choice.layout == L::name(); },
            [&]<class L>(std::type_identity<L>) {
              const bool exec_found = detail::find_type(
                  Executors{}, [&]<class E>(std::type_identity<E>) { return choice.executor == E::name(); },
                  [&]<class E>(std::type_identity<E>) { f(std::type_identity<Attention<V, L, E, T>>{}); });
              require<ShapeError>(exec_found, "unknown executor '", choice.executor, "'; available: ",
                                  detail::names(Executors{}));
            });
        require<ShapeError>(layout_found, "unknown cache layout '", choice.layout, "'; available: ", detail::names(Layouts{}));
      });
  const std::string variant =
      choice.variant == "gqa" ? "gqa with group size " + std::to_string(choice.group_size) : "'" + choice.variant + "'";
  require<ShapeError>(found, "variant ", variant, " is not instantiated; available: ", detail::names(Variants{}));
}

}  // namespace polyattn
