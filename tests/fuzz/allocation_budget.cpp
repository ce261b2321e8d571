// AllocationBudget through the sanitizer allocator's malloc/free hooks (the harnesses are always
// built with AddressSanitizer, whose allocator calls them for every allocation and free).
#include "allocation_budget.hpp"

#include <sanitizer/allocator_interface.h>
#include <sanitizer/common_interface_defs.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

namespace polyattn_fuzz {
namespace {

std::atomic<bool> g_counting{false};
std::atomic<std::int64_t> g_live{0};  // bytes allocated minus bytes freed since counting began
std::size_t g_cap = 0, g_input_size = 0;
std::int64_t g_peak = 0;               // over this input
double g_largest_fraction = 0;         // over the run: the input whose peak came closest to its cap
std::size_t g_largest_peak = 0, g_largest_peak_input = 0;

void on_malloc(const volatile void*, std::size_t size) {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  const std::int64_t live = g_live.fetch_add(static_cast<std::int64_t>(size), std::memory_order_relaxed) + static_cast<std::int64_t>(size);
  if (live > g_peak) g_peak = live;
  if (live > static_cast<std::int64_t>(g_cap)) {
    g_counting = false;
    std::fprintf(stderr,
                 "\n==fuzz== BROKEN INVARIANT: %" PRId64 " heap bytes live after an allocation of %zu bytes; the cap for an "
                 "input of %zu bytes is %zu (16 x input + 64 MiB)\n",
                 live, size, g_input_size, g_cap);
    __sanitizer_print_stack_trace();
    std::abort();
  }
}

void on_free(const volatile void* p) {
  if (!p || !g_counting.load(std::memory_order_relaxed)) return;
  // Frees of blocks allocated before counting began make `live` an underestimate by their size,
  // never an overestimate: the cap is never hit spuriously.
  g_live.fetch_sub(static_cast<std::int64_t>(__sanitizer_get_allocated_size(p)), std::memory_order_relaxed);
}

void print_largest() {
  if (g_largest_peak == 0) return;
  std::fprintf(stderr, "==fuzz== allocation budget: closest to the cap: %zu heap bytes live for an input of %zu bytes (%.1f%% of its cap)\n",
               g_largest_peak, g_largest_peak_input, 100.0 * g_largest_fraction);
}

}  // namespace

AllocationBudget::AllocationBudget(std::size_t input_size) {
  static const bool installed = [] {
    if (__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) == 0) {
      std::fprintf(stderr, "==fuzz== cannot install the sanitizer malloc hooks: the allocation budget would not be enforced\n");
      std::abort();
    }
    std::atexit(print_largest);
    return true;
  }();
  (void)installed;
  g_input_size = input_size;
  g_cap = kBudgetPerInputByte * input_size + kBudgetBase;
  g_live = 0;
  g_peak = 0;
  g_counting = true;
}

AllocationBudget::~AllocationBudget() {
  g_counting = false;
  const double fraction = static_cast<double>(g_peak) / static_cast<double>(g_cap);
  if (fraction > g_largest_fraction) {
    g_largest_fraction = fraction;
    g_largest_peak = static_cast<std::size_t>(g_peak);
    g_largest_peak_input = g_input_size;
  }
}

}  // namespace polyattn_fuzz
