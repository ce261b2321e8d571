// Whisper on the GPU (--device cuda): the cuBLAS engine for the products (cublas_dense.cuh)
// against double oracles, and every combination of the cuda backend (cuda_policies.cuh, attention
// on exec::Cuda; compiled once in cuda_backend.cu and linked here as in whisper_cuda) transcribing
// jfk.wav and its first 4 s, batched, to the CPU MHA baseline's tokens.
// Without a CUDA device the GPU case is skipped with a message (and the device check must say
// why); without the model or jfk.wav it is skipped like the other Whisper tests.
#include <doctest/doctest.h>

#include <whisper/backend.hpp>
#include <whisper/model.hpp>
#include <whisper/audio.hpp>

#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../support/cuda_device.hpp"
#include "dense_engine_checks.hpp"
#include "test_util.hpp"

using namespace polyattn::whisper;

namespace {

const bool kNoDevice = !polyattn::testing::have_cuda_device();  // prints why the GPU case is skipped

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("the cuda backend: the CPU policies' names, and its device check") {
    const Backend* cuda = cuda_backend();
    REQUIRE(cuda != nullptr);
    CHECK(cuda->name() == "cuda");
    // --device picks the executor; a policy name means the same variant and layout on either.
    const auto pairs = cuda->policy_pairs();
    CHECK(std::set<std::pair<std::string, std::string>>(pairs.begin(), pairs.end()).size() == pairs.size());
    CHECK(pairs.front() == std::pair<std::string, std::string>{"mha/hnd", "baseline"});
    CHECK(cuda->exact("slimk/hnd", "e-cache"));
    CHECK(!cuda->exact("mla192/hnd", "baseline"));
    CHECK_THROWS_WITH_AS(cuda->check_policies("mha/nhd", "baseline"), doctest::Contains("available: mha/hnd"), UnsupportedError);
    if (kNoDevice) CHECK_THROWS_WITH_AS(cuda->check_device(), doctest::Contains("no usable CUDA device"), Error);
    else CHECK_NOTHROW(cuda->check_device());
  }

  TEST_CASE("the cuBLAS engine: linear, conv1d_k3 and encoder attention against double oracles" * doctest::skip(kNoDevice)) {
    const std::unique_ptr<Dense> engine = cuda_backend()->make_dense();
    CHECK(engine->name().rfind("cublas (GPU ", 0) == 0);
    whisper_test::check_dense_engine(*engine);
  }

  TEST_CASE("the cuBLAS engine refuses a weight that changed at a known address" * doctest::skip(kNoDevice)) {
    const std::unique_ptr<Dense> engine = cuda_backend()->make_dense();
    whisper_test::Rng rng(5);
    Linear l{whisper_test::random_matrix(rng, 6, 4), whisper_test::random_matrix(rng, 1, 6)};
    const RowMatrixXf x = whisper_test::random_matrix(rng, 2, 4);
    const RowMatrixXf before = engine->linear(x, l);
    l.weight(0, 0) += 1.0f;  // first element: one of the sampled values
    CHECK_THROWS_WITH_AS(engine->linear(x, l), doctest::Contains("changed"), Error);
    const std::unique_ptr<Dense> fresh = cuda_backend()->make_dense();  // a new engine copies it again
    whisper_test::check_affine_bound(fresh->linear(x, l), x, l.weight, &l.bias);
    CHECK(before.allFinite());
  }

  TEST_CASE("jfk.wav: every exact CUDA combination gives the CPU MHA baseline's tokens" * doctest::skip(kNoDevice)) {
    const std::string dir = whisper_test::model_dir();
    const std::string wav = whisper_test::data_file("jfk.wav");
    if (!whisper_test::have_file(dir + "/model.bin") || !whisper_test::have_file(wav)) return;
    const WhisperModel model = WhisperModel::load_ct2(dir);
    const std::vector<float> jfk = load_audio_16k_mono(wav);
    // Two windows that end apart in one batch: the GPU decodes a batch whose lengths differ.
    const std::vector<std::vector<float>> files{jfk, std::vector<float>(jfk.begin(), jfk.begin() + 4 * 16000)};
    const std::span<const std::vector<float>> audio(files);
    TranscribeOptions opt;  // not designated: nvcc's host code warns about the omitted on_window
    opt.batch = 2;
    opt.threads = 2;
    const Transcription cpu = model.transcribe<DefaultPolicies>(audio, opt);
    REQUIRE(cpu.files.size() == files.size());
    CHECK(cpu.files[0].tokens.size() == 24);  // test_model.cpp checks them against CTranslate2

    const Backend& cuda = *cuda_backend();
    for (const auto& [self, cross] : cuda.policy_pairs()) {
      INFO("--device cuda --self " << self << " --cross " << cross);
      const Transcription got = cuda.transcribe(model, self, cross, AudioSource::of(audio), opt);
      CHECK(got.report.dense.rfind("cublas", 0) == 0);  // the products ran on the GPU too
      REQUIRE(got.files.size() == files.size());
      for (std::size_t f = 0; f < files.size(); ++f) {
        INFO("file " << f);
        // Whisper-MLA below full rank approximates (as on the CPU, test_model.cpp): only reported.
        if (cuda.exact(self, cross)) CHECK(got.files[f].tokens == cpu.files[f].tokens);
        else MESSAGE(self << " " << cross << " on cuda, file " << f << ": \"" << got.files[f].text << "\"");
      }
    }
  }
}
