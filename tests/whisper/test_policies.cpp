#include <doctest/doctest.h>

#include <whisper/model.hpp>
#include <whisper/policies.hpp>
#include <whisper/audio.hpp>
#include <whisper/wer.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include "../support/check_throws.hpp"
#include "sanitizer_subset.hpp"
#include "test_util.hpp"

using namespace polyattn::whisper;

TEST_SUITE("policies") {
  TEST_CASE("the dispatcher maps --self/--cross names to types and refuses others by name") {
    using PagedBaseline = DecoderPolicies<Self<self_kind::Mha, polyattn::Paged<16>>, Cross<polyattn::cross::Baseline>>;
    using SlimShared = DecoderPolicies<Self<self_kind::SlimK>, Cross<polyattn::cross::SharedE>>;
    int calls = 0;
    dispatch_policies("mha/paged16", "baseline", [&]<class P>(std::type_identity<P>) {
      CHECK(std::is_same_v<P, PagedBaseline>);
      ++calls;
    });
    dispatch_policies("mha/nhd", "baseline", [&]<class P>(std::type_identity<P>) {
      CHECK(std::is_same_v<P, DefaultPolicies>);
      ++calls;
    });
    dispatch_policies("slimk/nhd", "e-cache", [&]<class P>(std::type_identity<P>) {
      CHECK(std::is_same_v<P, SlimShared>);
      ++calls;
    });
    CHECK(calls == 3);
    const std::string all = available_policies();
    for (const char* pair : {"--self mha/nhd --cross baseline", "--self slimk/nhd --cross baseline", "--self xcache/nhd --cross baseline",
                             "--self mla96/nhd --cross baseline", "--self mha/nhd --cross k-only", "--self mha/nhd --cross e-cache",
                             "--self mha/nhd --cross hybrid"})
      CHECK_MESSAGE(all.find(pair) != std::string::npos, pair);
    CHECK(is_exact_policy<SlimShared>);
    CHECK(!is_exact_policy<DecoderPolicies<Self<self_kind::Mla<96>>, Cross<polyattn::cross::Baseline>>>);

    auto never = [](auto) { FAIL("called for a refused name"); };
    CHECK_THROWS_WITH_AS(dispatch_policies("slimk1/nhd", "baseline", never),
                         "--self 'slimk1/nhd' is not an instantiated self-attention policy; available: mha/nhd, mha/paged16, slimk/nhd, "
                         "xcache/nhd, mla96/nhd, mla192/nhd, mla384/nhd",
                         UnsupportedError);
    CHECK_THROWS_WITH_AS(dispatch_policies("mha/nhd", "v-only", never),
                         "--cross 'v-only' is not an instantiated cross-attention policy; available: baseline, k-only, e-cache, hybrid",
                         UnsupportedError);
    CHECK_THROWS_AS(dispatch_policies("mha/hnd", "baseline", never), UnsupportedError);
    // Known names that are not instantiated together are refused too, listing the pairs.
    polyattn::testing::check_throws_with<UnsupportedError>([&] { dispatch_policies("mla96/nhd", "hybrid", never); },
                                                           "--self mla96/nhd with --cross hybrid is not instantiated; available: --self mha/nhd");
  }

  TEST_CASE("batched decoding: each file's tokens equal decoding it alone") {
    const std::string dir = whisper_test::model_dir();
    const std::string wav = whisper_test::data_file("jfk.wav");
    if (!whisper_test::have_file(dir + "/model.bin") || !whisper_test::have_file(wav)) return;
    const WhisperModel model = WhisperModel::load_ct2(dir);
    const std::vector<float> jfk = load_audio_16k_mono(wav);
    // jfk (11 s), its first 4 s (ends sooner), and 41 s: jfk, silence to 30 s, jfk (two windows).
    // Under the sanitizers the first two, batched together (sanitizer_subset.hpp; windows that
    // join as others finish, and files of two windows, are decoded there by the synthetic-model
    // test of bug 7 in test_model.cpp).
    std::vector<float> twice(static_cast<std::size_t>(16000 * 30), 0.0f);
    std::copy(jfk.begin(), jfk.end(), twice.begin());
    twice.insert(twice.end(), jfk.begin(), jfk.end());
    std::vector<std::vector<float>> files{jfk, std::vector<float>(jfk.begin(), jfk.begin() + 4 * 16000), twice};
    if (whisper_test::kSanitizerSubset) files.pop_back();

    std::vector<Transcript> alone;
    for (const auto& f : files) alone.push_back(model.transcribe(f, {.batch = 1, .threads = 2}));
    for (const auto& t : alone) MESSAGE("alone: " << t.windows << " window(s), " << t.tokens.size() << " tokens: \"" << t.text << "\"");
    CHECK(alone[0].tokens.size() == 24);
    CHECK(alone[1].tokens.size() < alone[0].tokens.size());
    if (files.size() > 2) {
      CHECK(alone[2].windows == 2);
      CHECK(alone[2].tokens.size() > alone[0].tokens.size());
      CHECK(alone[2].text.find("ask not what your country") != alone[2].text.rfind("ask not what your country"));
    }
    int windows = 0;
    for (const auto& t : alone) windows += t.windows;

    auto check_batched = [&]<class P>(std::type_identity<P>, int batch) {
      INFO(P::name() << ", batch " << batch);
      std::vector<std::pair<std::size_t, double>> progress;
      TranscribeOptions opt{.batch = batch, .threads = 2};
      opt.on_window = [&](std::size_t file, double done, double total) {
        progress.emplace_back(file, done);
        CHECK(done <= total + 0.02);  // the last mel frame may reach past the last sample
        CHECK(total == doctest::Approx(double(files[file].size()) / 16000.0));
      };
      const Transcription r = model.transcribe<P>(std::span<const std::vector<float>>(files), opt);
      REQUIRE(r.files.size() == files.size());
      for (std::size_t f = 0; f < files.size(); ++f) {
        INFO("file " << f);
        CHECK(r.files[f].tokens == alone[f].tokens);
        CHECK(r.files[f].text == alone[f].text);
        CHECK(r.files[f].windows == alone[f].windows);
      }
      CHECK(progress.size() == std::size_t(windows));  // every window reported once
      CHECK(r.report.windows == windows);
      CHECK(r.report.max_batch == std::min(batch, windows));
      std::size_t tokens = 0;
      for (const auto& t : alone) tokens += t.tokens.size();
      CHECK(r.report.text_tokens == tokens);
      // Memory: the cross cache holds 1500 frames per live window; self tokens are counted.
      CHECK(r.report.peak.cross.tokens == std::size_t(1500) * std::size_t(std::min(batch, windows)));
      CHECK(r.report.peak.cross.bytes_held == r.report.peak.cross.tokens * r.report.peak.cross.bytes_per_token);
      CHECK(r.report.peak.self.bytes_per_token == std::size_t(4 * 2 * 384 * 4));
      CHECK(r.report.peak.self.tokens > 0);
    };
    // batch 2: windows join as others finish (continuous batching); batch 8: all at once.
    check_batched(std::type_identity<DefaultPolicies>{}, 2);
    if (!whisper_test::kSanitizerSubset)
      check_batched(std::type_identity<combination::MhaPaged>{}, 8);
  }
}

TEST_SUITE("espeak") {
  TEST_CASE("word error rate: normalised words, Levenshtein distance") {
    CHECK(word_errors("Ask not what your country can do for you.", "ask not, what your country can do for you").errors == 0);
    CHECK(word_errors("a b c d", "a x c d").errors == 1);        // substitution
    CHECK(word_errors("a b c d", "a c d").errors == 1);          // deletion
    CHECK(word_errors("a b c d", "a b b c d e").errors == 2);    // insertions
    CHECK(word_errors("a b c d", "").rate() == doctest::Approx(1.0));
    CHECK(word_errors("", "").rate() == 0.0);
    CHECK(normalized_words("It's 9 o'clock!") == std::vector<std::string>{"it's", "9", "o'clock"});
  }

  // Speech synthesized by espeak-ng (22.05 kHz, resampled by the WAV reader), decoded as one
  // batch with beam size 5: the MHA baseline must give CTranslate2's beam-5 tokens, and every exact
  // policy the baseline's (under the sanitizers one sentence and two pairs: sanitizer_subset.hpp).
  // Beam search and greedy decoding differ on sentences 0, 2 and 3. tiny.en mishears some of
  // espeak's robotic speech; the word error rate against the text is reported.
  TEST_CASE("espeak-ng sentences at beam size 5: CTranslate2's tokens, and every exact policy gives the tokens of the MHA baseline") {
    const std::string dir = whisper_test::model_dir();
    if (!whisper_test::have_file(dir + "/model.bin")) return;
    if (std::system("command -v espeak-ng >/dev/null 2>&1") != 0) {
      whisper_test::skip_or_fail("espeak-ng is not installed (apt-get install espeak-ng)");
      return;
    }
    std::vector<std::string> sentences = {
        "Memory bandwidth limits every decoding step.",
        "Please call Stella and ask her to bring these things with her from the store.",
        "The weather today is sunny with a light breeze from the west.",
        "Every new token reads the whole cache of keys and values.",
    };
    // CTranslate2 4.8.5, generate(beam_size=5) on the same tiny.en weights, each sentence
    // resampled to 16 kHz with libsoxr HQ (python-soxr): bench/whisper/whisper_vs_ctranslate2.sh --beam-size 5
    // on those files (the command is in examples/whisper/README.md, "Beam search").
    std::vector<std::vector<int>> peer = {
        {11436, 284, 2666, 340, 284, 790, 39938, 2239, 13},
        {4222, 869, 45856, 290, 1265, 607, 284, 2222, 777, 1243, 351, 607, 422, 262, 3650, 13},
        {383, 6193, 1909, 318, 2067, 351, 257, 1657, 28633, 422, 262, 7421, 13},
        {790, 649, 11241, 9743, 262, 2472, 5003, 319, 8251, 290, 28552, 13},
    };
    sentences.resize(whisper_test::kEspeakSentences);  // fewer under the sanitizers
    peer.resize(sentences.size());
    std::vector<std::vector<float>> audio;
    for (std::size_t i = 0; i < sentences.size(); ++i) {
      const std::string path = whisper_test::temp_path("espeak_" + std::to_string(i) + ".wav");
      REQUIRE(std::system(("espeak-ng -w '" + path + "' '" + sentences[i] + "'").c_str()) == 0);
      audio.push_back(load_audio_16k_mono(path));
      std::filesystem::remove(path);
    }
    const WhisperModel model = WhisperModel::load_ct2(dir);
    const TranscribeOptions opt{.batch = static_cast<int>(audio.size()), .threads = 2, .beam_size = 5};
    const Transcription reference = model.transcribe<DefaultPolicies>(std::span<const std::vector<float>>(audio), opt);
    for (std::size_t i = 0; i < sentences.size(); ++i) {
      const WordErrors e = word_errors(sentences[i], reference.files[i].text);
      MESSAGE("\"" << sentences[i] << "\" -> \"" << reference.files[i].text << "\": WER " << e.errors << "/" << e.reference_words);
      CHECK(reference.files[i].tokens == peer[i]);
    }
    CHECK(reference.report.max_sequences == 5 * static_cast<int>(sentences.size()));
    []<class... Ps>(polyattn::TypeList<Ps...>, const WhisperModel& m, std::span<const std::vector<float>> x, const TranscribeOptions& o,
                    const Transcription& want) {
      (..., [&] {
        if constexpr (is_exact_policy<Ps> && !std::is_same_v<Ps, DefaultPolicies>) {
          INFO("policies: " << Ps::name());
          const Transcription got = m.transcribe<Ps>(x, o);
          for (std::size_t i = 0; i < want.files.size(); ++i) CHECK(got.files[i].tokens == want.files[i].tokens);
        }
      }());
    }(whisper_test::RealModelCombinations{}, model, std::span<const std::vector<float>>(audio), opt, reference);
  }
}
