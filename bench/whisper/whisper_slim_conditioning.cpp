// cond(W_k) and max|W_kv| of every attention layer of a real Whisper model (CTranslate2 model
// directory), the figures slim attention's conversion checks: encoder self, decoder self and
// decoder cross. Nothing is refused here (the limit is lifted) so that every layer is measured;
// the last column says whether convert_to_slim_k<float> / <half> would accept it by default.
// Usage: whisper_slim_conditioning <ct2 model dir>   (e.g. models/tiny.en from fetch_model.sh)
#include <cstdio>
#include <exception>
#include <string>

#include <Eigen/Core>

#include <polyattn/convert/slim_k.hpp>

#include "whisper/weights.hpp"

namespace {

using namespace polyattn;

/// Our W_k (d_in, e) from a PyTorch-layout (out, in) weight block of `rows` rows from `first`.
RowMatrixXf columns_layout(const RowMatrixXf& w, Eigen::Index first, Eigen::Index rows) { return w.middleRows(first, rows).transpose(); }

void report(const char* what, int layer, const RowMatrixXf& w_k, const RowMatrixXf& w_v) {
  const SlimKOptions measure{.layer = layer, .max_predicted_error = 1e300};
  const SlimKReport r = apply_key_inverse<float>(w_k, w_v, measure).second;
  auto accepts = [&](auto tag) {
    try {
      apply_key_inverse<decltype(tag)>(w_k, w_v, {.layer = layer});
      return "yes";
    } catch (const ConversionError&) {
      return "no";
    }
  };
  std::printf("| %-13s | %2d | %10.1f | %9.3g | %9.2e | %s / %s |\n", what, layer, r.cond_k, r.max_abs_w_kv, r.predicted_relative_error,
              accepts(float{}), accepts(Eigen::half{}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <ctranslate2 whisper model dir>\n", argv[0]);
    return 2;
  }
  try {
    const auto dir = whisper::load_ct2_model_dir(argv[1]);
    const whisper::WhisperWeights w = whisper::weights_from_ct2(dir.model);
    std::printf("| attention     | layer | cond(W_k) | max|W_kv| | 0.1 eps32 cond | accepted float / half |\n|---|---|---|---|---|---|\n");
    const Eigen::Index d = w.dims.n_audio_state;
    for (std::size_t l = 0; l < w.encoder.size(); ++l)
      report("encoder self", int(l), columns_layout(w.encoder[l].qkv.weight.as_float(), d, d), columns_layout(w.encoder[l].qkv.weight.as_float(), 2 * d, d));
    const Eigen::Index t = w.dims.n_text_state;
    for (std::size_t l = 0; l < w.decoder.size(); ++l) {
      report("decoder self", int(l), columns_layout(w.decoder[l].self_qkv.weight.as_float(), t, t), columns_layout(w.decoder[l].self_qkv.weight.as_float(), 2 * t, t));
      report("decoder cross", int(l), columns_layout(w.decoder[l].cross_kv.weight.as_float(), 0, t), columns_layout(w.decoder[l].cross_kv.weight.as_float(), t, t));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "whisper_slim_conditioning: %s\n", e.what());
    return 1;
  }
}
