// The memory bound every fuzz harness enforces: while one input runs, the heap bytes live at once
// (malloc, operator new, Eigen's aligned allocations: everything AddressSanitizer's allocator
// serves) stay within 16 x the input's size + 64 MiB. A size field believed before it is checked
// against the bytes that back it shows up as an allocation far beyond that; the harness then
// aborts, which libFuzzer reports as a crash and keeps the input.
#pragma once

#include <cstddef>

namespace polyattn_fuzz {

inline constexpr std::size_t kBudgetPerInputByte = 16;
inline constexpr std::size_t kBudgetBase = std::size_t{64} << 20;

// Counts allocations from construction to destruction (one input; not reentrant).
class AllocationBudget {
 public:
  explicit AllocationBudget(std::size_t input_size);
  ~AllocationBudget();
  AllocationBudget(const AllocationBudget&) = delete;
  AllocationBudget& operator=(const AllocationBudget&) = delete;
};

}  // namespace polyattn_fuzz
