// Long-form transcription's parts: the timestamp rules, segments and seeking, the fallback's
// compression ratio and seeded sampling, the output formats parsed back. The cases that run a
// model (the fallback, jfk.wav against faster-whisper) are in test_model.cpp, which compiles the
// model's headers already.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <whisper/beam_search.hpp>
#include <whisper/output_formats.hpp>
#include <whisper/segments.hpp>
#include <whisper/timestamp_rules.hpp>

#include "test_util.hpp"

using namespace polyattn::whisper;

namespace {

// A toy vocabulary: text 0..9, <|endoftext|> 10, <|notimestamps|> 11, timestamps 12..19
// (<|0.00|> .. <|0.14|>), the first token at most <|0.04|> (14).
const TimestampTokens kStamps{.eot = 10, .no_timestamps = 11, .begin = 12, .end = 19, .max_initial = 14};

// Which tokens the rules leave allowed, after `sampled`, from logits `base` (all 0 by default).
std::vector<int> allowed(const std::vector<int>& sampled, RowVectorXf base = RowVectorXf::Zero(20)) {
  apply_timestamp_rules(base, sampled, kStamps);
  std::vector<int> ids;
  for (int i = 0; i < base.size(); ++i)
    if (std::isfinite(base[i])) ids.push_back(i);
  return ids;
}

std::vector<int> range(int from, int to_inclusive) {
  std::vector<int> v;
  for (int i = from; i <= to_inclusive; ++i) v.push_back(i);
  return v;
}

std::vector<int> join(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_SUITE("longform") {
  TEST_CASE("timestamp rules: a timestamp first, pairs, never backwards, and a timestamp when they are together likelier") {
    CHECK(allowed({}) == range(12, 14));  // only <|0.00|> .. max_initial
    // After text: text, eot or a timestamp later than the last one (13), as long as one text token
    // is likelier than the timestamps together: here e^5 against 6 e^0.
    RowVectorXf likely_text = RowVectorXf::Zero(20);
    likely_text[3] = 5.0f;
    CHECK(allowed({13, 4}, likely_text) == join(range(0, 10), range(14, 19)));
    // With every logit equal, the 6 allowed timestamps together beat any one text token: a timestamp.
    CHECK(allowed({13, 4}) == range(14, 19));
    // After a lone timestamp (the end of a segment): eot or a timestamp not before it.
    RowVectorXf likely_eot = RowVectorXf::Zero(20);
    likely_eot[10] = 5.0f;
    CHECK(allowed({13, 4, 15}, likely_eot) == join({10}, range(15, 19)));
    // After a pair (end, next start): text or eot, no timestamp.
    CHECK(allowed({13, 4, 15, 15}) == range(0, 10));
    // At step 1 after the first timestamp: the first is treated as a pair (as CTranslate2 does).
    CHECK(allowed({12}) == range(0, 10));
  }

  TEST_CASE("split_window: segments between timestamp pairs, and where the next window starts") {
    const int b = 50363;  // <|0.00|>
    SUBCASE("ends on a lone timestamp: every segment complete, the next window after this one") {
      const std::vector<int> t = {b, 10, 11, b + 400, b + 400, 12, b + 550};
      const WindowSplit s = split_window(t, b, 3000);
      REQUIRE(s.segments.size() == 2);
      CHECK(s.segments[0].first == 0);
      CHECK(s.segments[0].last == 4);
      CHECK(s.segments[0].start == 0.0);
      CHECK(s.segments[0].end == doctest::Approx(8.0));
      CHECK(s.segments[1].first == 4);
      CHECK(s.segments[1].last == 7);
      CHECK(s.segments[1].end == doctest::Approx(11.0));
      CHECK(s.seek_frames == 3000);
    }
    SUBCASE("the last segment cut by the window's end: the next window starts at the last complete one's end") {
      const std::vector<int> t = {b + 50, 10, b + 700, b + 700, 12, 13};
      const WindowSplit s = split_window(t, b, 3000);
      REQUIRE(s.segments.size() == 1);
      CHECK(s.segments[0].start == doctest::Approx(1.0));
      CHECK(s.segments[0].end == doctest::Approx(14.0));
      CHECK(s.seek_frames == 1400);  // 14 s: two frames per timestamp step
    }
    SUBCASE("no pair: one segment to the last timestamp, or to the window's end") {
      const WindowSplit s = split_window(std::vector<int>{b, 10, 11, b + 150}, b, 2500);
      REQUIRE(s.segments.size() == 1);
      CHECK(s.segments[0].end == doctest::Approx(3.0));
      CHECK(s.seek_frames == 2500);
      const WindowSplit text_only = split_window(std::vector<int>{10, 11}, b, 2500);
      CHECK(text_only.segments[0].end == doctest::Approx(25.0));
    }
  }

  TEST_CASE("compression ratio: zlib at its default level, as Python's zlib.compress") {
    // faster-whisper 1.2.1 reports 1.3417721518987342 for this text (jfk.wav, beam 5): 106 / 79 bytes.
    CHECK(compression_ratio("And so, my fellow Americans ask not what your country can do for you ask what you can do for your country.") ==
          doctest::Approx(106.0 / 79.0).epsilon(1e-12));
    std::string repeated;
    for (int i = 0; i < 40; ++i) repeated += "the same words again ";
    CHECK(compression_ratio(repeated) > 2.4);
    CHECK(compression_ratio("") == 0.0);
  }

  TEST_CASE("sampling: seeded draws repeat, follow softmax(log-probs / temperature), and keep the untempered log-prob") {
    const RowMatrixXf row = (RowMatrixXf(1, 4) << std::log(0.7f), std::log(0.2f), std::log(0.1f), -INFINITY).finished();
    auto first_tokens = [&](float temperature, std::uint64_t seed) {
      BeamSearch s({.max_new_tokens = 8, .temperature = temperature, .best_of = 5, .seed = seed}, 3);
      const std::vector<int> parents = s.advance(row);
      CHECK(parents == std::vector<int>(5, 0));  // five samples from the one beam
      std::vector<int> tokens;
      for (const auto& beam : s.beams()) tokens.push_back(beam.tokens.back());
      return tokens;
    };
    CHECK(first_tokens(1.0f, 7) == first_tokens(1.0f, 7));
    int counts[4] = {0, 0, 0, 0};
    for (std::uint64_t seed = 0; seed < 400; ++seed)
      for (int t : first_tokens(1.0f, seed)) ++counts[t];
    // 2000 draws: 1400 / 400 / 200 expected, each within 5 standard deviations; the -inf token never.
    CHECK(std::abs(counts[0] - 1400) < 5 * std::sqrt(2000 * 0.7 * 0.3));
    CHECK(std::abs(counts[1] - 400) < 5 * std::sqrt(2000 * 0.2 * 0.8));
    CHECK(std::abs(counts[2] - 200) < 5 * std::sqrt(2000 * 0.1 * 0.9));
    CHECK(counts[3] == 0);
    // A low temperature sharpens the distribution towards the most likely token.
    int sharp = 0;
    for (std::uint64_t seed = 0; seed < 40; ++seed)
      for (int t : first_tokens(0.05f, seed)) sharp += t == 0;
    CHECK(sharp == 200);
    // Every sample ends at <|endoftext|> (3) when nothing else is allowed; log-probs are untempered.
    BeamSearch s({.max_new_tokens = 8, .temperature = 0.5f, .best_of = 2, .seed = 1}, 3);
    s.advance(row);
    const RowMatrixXf end = (RowMatrixXf(2, 4) << -INFINITY, -INFINITY, -INFINITY, 0.0f, -INFINITY, -INFINITY, -INFINITY, 0.0f).finished();
    CHECK(s.advance(end).empty());
    REQUIRE(s.finished());
    CHECK(s.hypotheses().size() == 2);
    for (const auto& h : s.hypotheses()) {
      REQUIRE(h.tokens.size() == 1);
      CHECK(h.log_prob == doctest::Approx(row(0, h.tokens.front())));  // log p of the first token, + log 1 for eot
    }
  }

  TEST_CASE("output formats: SRT and WebVTT follow their grammar, JSON parses back, files are named after the audio") {
    Transcript t;
    t.segments.push_back({.start = 0.0, .end = 8.0, .text = " And so --> my fellow", .tokens = {50363, 843, 50763}, .avg_log_prob = -0.25f});
    t.segments.push_back({.start = 8.0, .end = 8.0, .text = " ", .tokens = {}});  // empty: no cue
    t.segments.push_back({.start = 3661.5, .end = 3723.25, .text = " ask what you can do.", .tokens = {1265, 13}, .no_speech_prob = 0.06f});
    t.text = " And so --> my fellow ask what you can do.";
    const std::string srt = format_srt(t), vtt = format_vtt(t);
    const std::regex srt_grammar(R"((\d+\n\d{2}:\d{2}:\d{2},\d{3} --> \d{2}:\d{2}:\d{2},\d{3}\n[^\n]+\n\n)+)");
    const std::regex vtt_grammar(R"(WEBVTT\n\n(\d{2}:\d{2}:\d{2}\.\d{3} --> \d{2}:\d{2}:\d{2}\.\d{3}\n[^\n]+\n\n)+)");
    CHECK(std::regex_match(srt, srt_grammar));
    CHECK(std::regex_match(vtt, vtt_grammar));
    CHECK(srt == "1\n00:00:00,000 --> 00:00:08,000\nAnd so -> my fellow\n\n2\n01:01:01,500 --> 01:02:03,250\nask what you can do.\n\n");
    CHECK(format_txt(t) == "And so -> my fellow\nask what you can do.\n");
    const nlohmann::json j = nlohmann::json::parse(format_json(t));
    CHECK(j["text"] == t.text);
    REQUIRE(j["segments"].size() == 3);
    CHECK(j["segments"][2]["start"] == 3661.5);
    CHECK(j["segments"][2]["tokens"] == std::vector<int>{1265, 13});
    CHECK(j["segments"][0]["avg_logprob"].get<double>() == doctest::Approx(-0.25));
    CHECK(j["segments"][0]["no_speech_prob"].is_null());
    CHECK_THROWS_WITH_AS(format_transcript(t, "doc"), doctest::Contains("not txt, srt, vtt or json"), Error);
    const std::filesystem::path dir = whisper_test::temp_path("outputs");
    const std::filesystem::path written = write_transcript(t, "srt", dir, "/some/where/jfk.wav");
    CHECK(written == dir / "jfk.srt");
    CHECK(std::filesystem::file_size(written) == srt.size());
    std::filesystem::remove_all(dir);
  }
}
