// libFuzzer harness: a CTranslate2 model.bin, parsed (Ct2ModelBin::parse) and assembled into
// Whisper's weights (weights_from_ct2), as WhisperModel::load_ct2 does.
// Invariants: every variable holds its shape's product of elements, every alias resolves, and
// the weights have the sizes their dimensions say, within Whisper's architecture.
#include <whisper/ct2_model.hpp>
#include <whisper/weights.hpp>

#include "harness.hpp"
#include "model_invariants.hpp"

namespace pw = polyattn::whisper;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return polyattn_fuzz::run_one(data, size, [](std::span<const std::uint8_t> bytes) {
    const pw::Ct2ModelBin m = pw::Ct2ModelBin::parse(bytes);
    for (const auto& [name, v] : m.variables())
      polyattn_fuzz::check_element_count("variable '" + name + "'", v.shape, v.is_float() ? v.elements.size() : v.ints.size());
    for (const auto& [alias, target] : m.aliases())
      if (&m.get(alias) != &m.get(target)) polyattn_fuzz::broken("alias '" + alias + "' does not resolve to '" + target + "'");
    polyattn_fuzz::check_weights(pw::weights_from_ct2(m));
  });
}
