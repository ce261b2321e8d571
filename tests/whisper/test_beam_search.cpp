// BeamSearch (beam_search.hpp) on scripted log-probabilities over a six-token vocabulary, where
// each step's outcome follows from CTranslate2's rules by hand: the candidates, which of them
// finish, which replace them, and the final ranking by log-prob / length^length_penalty.
#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <vector>

#include <whisper/beam_search.hpp>
#include <whisper/error.hpp>
#include <whisper/matrix.hpp>

using namespace polyattn::whisper;

namespace {

constexpr int kEot = 5;

// One row of log-probabilities per beam from probabilities (each row sums to 1).
RowMatrixXf log_probs(std::initializer_list<std::initializer_list<float>> rows) {
  RowMatrixXf m(static_cast<Eigen::Index>(rows.size()), 6);
  Eigen::Index r = 0;
  for (const auto& row : rows) {
    REQUIRE(row.size() == 6);
    Eigen::Index c = 0;
    for (float p : row) m(r, c++) = std::log(p);
    CHECK(m.row(r).array().exp().sum() == doctest::Approx(1.0));
    ++r;
  }
  return m;
}

}  // namespace

TEST_SUITE("beam") {
  TEST_CASE("beam size 1 is greedy: the most likely token at each step, until end-of-text") {
    BeamSearch s({.beam_size = 1}, kEot);
    CHECK(s.advance(log_probs({{0.1f, 0.1f, 0.5f, 0.1f, 0.1f, 0.1f}})) == std::vector<int>{0});
    CHECK(s.beams().front().tokens == std::vector<int>{2});
    // A tie goes to the lower token id, as argmax.
    CHECK(s.advance(log_probs({{0.1f, 0.1f, 0.1f, 0.3f, 0.3f, 0.1f}})) == std::vector<int>{0});
    CHECK(s.beams().front().tokens == std::vector<int>{2, 3});
    CHECK(s.advance(log_probs({{0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.5f}})).empty());
    REQUIRE(s.finished());
    CHECK(s.best().tokens == std::vector<int>{2, 3});
    CHECK(s.best().ended);
    const float log_prob = std::log(0.5f) + std::log(0.3f) + std::log(0.5f);
    CHECK(s.best().log_prob == doctest::Approx(log_prob));
    CHECK(s.best().score == doctest::Approx(log_prob / 2));  // length without <|endoftext|>
    // Greedy stops at its first hypothesis whatever the patience (CTranslate2's GreedySearch).
    BeamSearch patient({.beam_size = 1, .patience = 3.0f}, kEot);
    patient.advance(log_probs({{0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.5f}}));
    CHECK(patient.finished());
  }

  // Beam 2 keeps 4 candidates per step. Step 0 (one beam): tokens 1 (0.4) and 2 (0.3) become the
  // beams. Step 1: beam 0 ends (0.4 * 0.9 = 0.36, the best candidate), so hypothesis [1] finishes
  // and the first candidate past the beam size that does not end, beam 1 + token 4 (0.09), takes
  // its place ahead of beam 1 + token 3 (0.15): both new beams extend old beam 1. Step 2: both end.
  TEST_CASE("a finished candidate is replaced by the next one that goes on; hypotheses are ranked by length-normalised log-prob") {
    auto run = [](const BeamSearchOptions& opt) {
      BeamSearch s(opt, kEot);
      CHECK(s.advance(log_probs({{0.1f, 0.4f, 0.3f, 0.05f, 0.05f, 0.1f}})) == std::vector<int>{0, 0});
      REQUIRE(s.beams().size() == 2);
      CHECK(s.beams()[0].tokens == std::vector<int>{1});
      CHECK(s.beams()[1].tokens == std::vector<int>{2});
      const std::vector<int> parents = s.advance(log_probs({{0.02f, 0.01f, 0.01f, 0.02f, 0.04f, 0.9f},
                                                            {0.02f, 0.03f, 0.05f, 0.5f, 0.3f, 0.1f}}));
      return std::pair{std::move(s), parents};
    };
    SUBCASE("length penalty 1: the search goes on until two hypotheses finish") {
      auto [s, parents] = run({.beam_size = 2});
      REQUIRE(!s.finished());
      CHECK(parents == std::vector<int>{1, 1});
      CHECK(s.beams()[0].tokens == std::vector<int>{2, 4});
      CHECK(s.beams()[1].tokens == std::vector<int>{2, 3});
      CHECK(s.beams()[0].log_prob == doctest::Approx(std::log(0.3f * 0.3f)));
      // Step 2: [2, 3] + eot (0.1425) then [2, 4] + eot (0.0855) finish: three hypotheses >= 2.
      CHECK(s.advance(log_probs({{0.01f, 0.01f, 0.01f, 0.01f, 0.01f, 0.95f}, {0.01f, 0.01f, 0.01f, 0.01f, 0.01f, 0.95f}})).empty());
      REQUIRE(s.finished());
      REQUIRE(s.hypotheses().size() == 3);
      // [1]: log 0.36 / 1 = -1.02; [2, 3]: log(0.15 * 0.95) / 2 = -0.97; [2, 4]: log(0.09 * 0.95) / 2 = -1.23.
      CHECK(s.hypotheses()[0].tokens == std::vector<int>{2, 3});
      CHECK(s.hypotheses()[0].score == doctest::Approx(std::log(0.3f * 0.5f * 0.95f) / 2));
      CHECK(s.hypotheses()[1].tokens == std::vector<int>{1});
      CHECK(s.hypotheses()[1].score == doctest::Approx(std::log(0.4f * 0.9f)));
      CHECK(s.hypotheses()[2].tokens == std::vector<int>{2, 4});
      for (const auto& h : s.hypotheses()) CHECK(h.ended);
    }
    SUBCASE("length penalty 0: the search ends when the best candidate has finished") {
      auto [s, parents] = run({.beam_size = 2, .length_penalty = 0.0f});
      REQUIRE(s.finished());
      CHECK(parents.empty());
      CHECK(s.best().tokens == std::vector<int>{1});
      CHECK(s.best().score == doctest::Approx(std::log(0.4f * 0.9f)));
    }
    SUBCASE("patience 0.5: round(2 * 0.5) = 1 hypothesis is enough") {
      auto [s, parents] = run({.beam_size = 2, .patience = 0.5f});
      REQUIRE(s.finished());
      CHECK(s.hypotheses().size() == 1);
      CHECK(s.best().tokens == std::vector<int>{1});
    }
    SUBCASE("patience 2: four hypotheses are needed, so step 2 does not end the search") {
      auto [s, parents] = run({.beam_size = 2, .patience = 2.0f});
      CHECK(!s.advance(log_probs({{0.01f, 0.01f, 0.01f, 0.01f, 0.01f, 0.95f}, {0.01f, 0.01f, 0.01f, 0.01f, 0.01f, 0.95f}})).empty());
      CHECK(!s.finished());
    }
  }

  TEST_CASE("at the last step every beam becomes a hypothesis that did not end") {
    BeamSearch s({.beam_size = 2, .max_new_tokens = 2}, kEot);
    s.advance(log_probs({{0.1f, 0.4f, 0.3f, 0.1f, 0.05f, 0.05f}}));
    CHECK(s.advance(log_probs({{0.1f, 0.6f, 0.1f, 0.1f, 0.05f, 0.05f}, {0.1f, 0.1f, 0.6f, 0.1f, 0.05f, 0.05f}})).empty());
    REQUIRE(s.finished());
    REQUIRE(s.hypotheses().size() == 2);
    CHECK(s.best().tokens == std::vector<int>{1, 1});  // 0.24 against [2, 2]: 0.18
    CHECK(!s.best().ended);
    CHECK(s.step() == 2);
  }

  TEST_CASE("bad options and misuse are refused") {
    CHECK_THROWS_WITH_AS(BeamSearch({.beam_size = 0}, kEot), doctest::Contains("beam_size must be >= 1"), Error);
    CHECK_THROWS_WITH_AS(BeamSearch({.patience = 0.0f}, kEot), doctest::Contains("patience must be > 0"), Error);
    CHECK_THROWS_WITH_AS(BeamSearch({.max_new_tokens = 0}, kEot), doctest::Contains("max_new_tokens must be >= 1"), Error);
    BeamSearch s({.beam_size = 2}, kEot);
    CHECK_THROWS_WITH_AS(s.best(), doctest::Contains("before the search finished"), Error);
    CHECK_THROWS_WITH_AS(s.advance(RowMatrixXf::Zero(2, 6)), doctest::Contains("2 rows of log-probs for 1 beams"), Error);
    RowMatrixXf nan = log_probs({{0.1f, 0.4f, 0.3f, 0.1f, 0.05f, 0.05f}});
    nan(0, 3) = std::nanf("");
    CHECK_THROWS_WITH_AS(s.advance(nan), doctest::Contains("NaN"), Error);
    BeamSearch done({.beam_size = 1}, kEot);
    done.advance(log_probs({{0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.5f}}));
    CHECK_THROWS_WITH_AS(done.advance(log_probs({{0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.5f}})), doctest::Contains("after the search finished"), Error);
  }
}
