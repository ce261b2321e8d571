// libFuzzer harness: a CTranslate2 config.json, parsed as load_ct2_model_dir does
// (parse_ct2_config) and applied to the decoding rules of a model as WhisperModel::load_ct2 does
// (apply_ct2_config, then the WhisperModel constructor, which checks the ids against the
// vocabulary; the model is the synthetic Whisper-shaped one with a byte-level vocabulary).
// The JSON is nlohmann::json's (parse_json, the typed accessors json_array / json_int): every
// failure must come out as a polyattn::whisper::Error, never as an nlohmann exception (which
// run_one reports as a crash).
// Invariants: nesting stays within parse_json's depth limit (kMaxJsonDepth below the top level),
// and the rules take exactly the config's suppress lists, or keep theirs when a list is absent.
#include <whisper/ct2_model.hpp>
#include <whisper/model.hpp>

#include <algorithm>

#include "harness.hpp"
#include "synthetic_files.hpp"

namespace pw = polyattn::whisper;

namespace {

int nesting(const pw::Json& j) {
  int deepest = 0;
  if (j.is_structured())
    for (const pw::Json& v : j) deepest = std::max(deepest, nesting(v));
  return j.is_structured() ? deepest + 1 : 0;
}

void check_list(const pw::Json& config, const char* key, const std::vector<int>& before, const std::vector<int>& after) {
  const auto found = config.find(key);
  const pw::Json* list = found == config.end() ? nullptr : &*found;
  const std::size_t expected = list ? pw::json_array(*list, key).size() : before.size();
  if (after.size() != expected || (!list && after != before))
    polyattn_fuzz::broken(std::string(key) + ": the rules hold " + std::to_string(after.size()) + " ids, the config " +
                          (list ? std::to_string(expected) : std::string("none")));
}

const pw::WhisperModel& synthetic_model() {
  static const pw::WhisperModel model = [] {
    const std::vector<std::string> vocab = whisper_test::byte_level_vocabulary();
    whisper_test::Rng rng(1);
    const auto tensors = whisper_test::tiny_pytorch_model(rng, static_cast<int>(vocab.size()), 4);
    const pw::Tokenizer tok = pw::Tokenizer::from_byte_level(vocab);
    return pw::WhisperModel(pw::weights_from_ct2(pw::Ct2ModelBin::parse(whisper_test::tiny_ct2(tensors))), tok,
                            pw::WhisperModel::default_rules(tok));
  }();
  return model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return polyattn_fuzz::run_one(data, size, [](std::span<const std::uint8_t> bytes) {
    const pw::Json config = pw::parse_ct2_config(polyattn_fuzz::as_text(bytes), "config.json");
    if (nesting(config) > pw::kMaxJsonDepth + 1) polyattn_fuzz::broken("nesting " + std::to_string(nesting(config)) + " passed the depth limit");
    const pw::WhisperModel& base = synthetic_model();
    pw::DecodingRules rules = base.rules();
    pw::apply_ct2_config(config, "config.json", rules);
    check_list(config, "suppress_ids", base.rules().suppress, rules.suppress);
    check_list(config, "suppress_ids_begin", base.rules().suppress_at_begin, rules.suppress_at_begin);
    const pw::WhisperModel model(base.weights(), base.tokenizer(), rules);
    for (const int id : model.rules().suppress)
      if (id < 0 || id >= model.dims().n_vocab) polyattn_fuzz::broken("suppressed id " + std::to_string(id) + " accepted");
  });
}
