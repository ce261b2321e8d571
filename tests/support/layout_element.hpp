// A cache layout and element type as one doctest template parameter: the (L, T) pairs a test of
// one variant instantiates, e.g. LayoutElement<Hnd, Eigen::half>.
#pragma once

namespace polyattn::testing {

template <class L, class T = float>
struct LayoutElement {
  using layout = L;
  using element = T;
};

}  // namespace polyattn::testing
