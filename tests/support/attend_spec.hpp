// An AttendSpec from its fields, in the order the primitive reads them (core/attend.hpp), with
// the usual softmax scale 1/sqrt(key_dim): for tests that drive the attend primitive directly.
#pragma once

#include <cmath>

#include <polyattn/core/attend.hpp>

namespace polyattn::testing {

inline AttendSpec attend_spec(int cache_heads, int group, int key_tensor, int key_offset, int key_dim, int value_tensor,
                              int value_offset, int value_dim, int key_group_stride = 0) {
  AttendSpec s;
  s.cache_heads = cache_heads;
  s.group = group;
  s.key_tensor = key_tensor;
  s.key_offset = key_offset;
  s.key_dim = key_dim;
  s.value_tensor = value_tensor;
  s.value_offset = value_offset;
  s.value_dim = value_dim;
  s.key_group_stride = key_group_stride;
  s.scale = 1.0f / std::sqrt(float(key_dim));
  return s;
}

}  // namespace polyattn::testing
