// Umbrella header: every policy that needs no CUDA compiler and no model code.
#pragma once

#include "polyattn/attention.hpp"
#include "polyattn/cache/contiguous.hpp"
#include "polyattn/cache/paged.hpp"
#include "polyattn/uncached_attention.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/core/shape.hpp"
#include "polyattn/core/thread_pool.hpp"
#include "polyattn/dispatch.hpp"
#include "polyattn/exec/cpu/cpu_simd.hpp"
#include "polyattn/exec/reference/reference.hpp"
#include "polyattn/variants/mha_gqa.hpp"
#include "polyattn/variants/slim_k.hpp"
#include "polyattn/variants/x_cache.hpp"
#include "polyattn/variants/mla.hpp"
#include "polyattn/variants/mtla.hpp"
