// Which keys a query row of a chunk sees, for prefill and uncached attention.
#pragma once

namespace polyattn {

/// `causal` = its own position and earlier (decoder self-attention), `full` = every key,
/// later tokens of the chunk included (encoder).
enum class Mask { causal, full };

}  // namespace polyattn
