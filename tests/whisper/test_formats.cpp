#include <doctest/doctest.h>

#include <whisper/ct2_model.hpp>
#include <whisper/decoding_rules.hpp>
#include <whisper/ggml_model.hpp>
#include <whisper/half_to_float.hpp>
#include <whisper/mapped_file.hpp>
#include <whisper/mel.hpp>
#include <whisper/weights.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "../support/resident_memory.hpp"
#include "synthetic_files.hpp"
#include "test_util.hpp"

using namespace polyattn::whisper;
using whisper_test::raw;
using whisper_test::small_ct2;
using whisper_test::write_ct2;
using whisper_test::write_ggml;

TEST_SUITE("ct2") {
  TEST_CASE("float16 and bfloat16 tensors convert bit exactly (Eigen::half, Eigen::bfloat16)") {
    // Every 16-bit pattern as a float16 and as a bfloat16 tensor, through the loader.
    std::vector<std::uint16_t> all(0x10000);
    for (std::uint32_t h = 0; h < 0x10000; ++h) all[h] = static_cast<std::uint16_t>(h);
    const Ct2ModelBin m = Ct2ModelBin::parse(write_ct2({{"h", {0x10000}, 4, raw(all)}, {"b", {0x10000}, 5, raw(all)}}, {}));
    const std::vector<float> half = m.get("h").values();
    const std::vector<float> bf16 = m.get("b").values();
    REQUIRE(half.size() == 0x10000);
    REQUIRE(bf16.size() == 0x10000);
    CHECK(half[0x3C00] == 1.0f);
    CHECK(half[0xC000] == -2.0f);
    CHECK(half[0x7BFF] == 65504.0f);
    CHECK(half[0x0001] == std::ldexp(1.0f, -24));
    CHECK(half[0x03FF] == std::ldexp(1023.0f, -24));
    CHECK(half[0x0400] == std::ldexp(1.0f, -14));
    CHECK(std::signbit(half[0x8000]));
    CHECK(half[0x7C00] == std::numeric_limits<float>::infinity());
    CHECK(std::isnan(half[0x7E00]));
    CHECK(bf16[0x3F80] == 1.0f);
    // Every finite half round-trips through float exactly (float -> half by Eigen's rounding);
    // a bfloat16 is the upper half of a float's bits.
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
      const float f = half[h];
      if (std::isfinite(f)) {
        const std::uint16_t bits = whisper_test::half_bits(f);
        if (bits != h) FAIL("half " << h << " -> " << f << " -> " << bits);
      }
      const std::uint32_t b = std::bit_cast<std::uint32_t>(bf16[h]);
      if (!std::isnan(bf16[h]) && b != h << 16) FAIL("bfloat16 " << h << " -> " << bf16[h]);
    }
  }

  TEST_CASE("half_to_float: every float16 pattern, at every length and offset around a vector, as the scalar conversion") {
    std::vector<Eigen::half> all(0x10000);
    for (std::uint32_t h = 0; h < 0x10000; ++h) all[h] = std::bit_cast<Eigen::half>(static_cast<std::uint16_t>(h));
    auto same = [](float got, Eigen::half h) {
      const float want = static_cast<float>(h);
      return std::isnan(want) ? std::isnan(got) : std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want);
    };
    std::vector<float> out(0x10000 + 1, -7.0f);
    half_to_float(all.data(), 0x10000, out.data());
    for (std::uint32_t h = 0; h < 0x10000; ++h)
      if (!same(out[h], all[h])) FAIL("half " << h << " -> " << out[h]);
    // Vector bodies and scalar tails: nothing outside [0, n) is written.
    for (Eigen::Index offset : {0, 1, 7}) {
      for (Eigen::Index n = 0; n <= 40; ++n) {
        std::fill(out.begin(), out.end(), -7.0f);
        half_to_float(all.data() + 0x3C00 + offset, n, out.data() + 1);
        CHECK(out[0] == -7.0f);
        CHECK(out[std::size_t(n) + 1] == -7.0f);
        for (Eigen::Index i = 0; i < n; ++i) CHECK(same(out[std::size_t(i) + 1], all[std::size_t(0x3C00 + offset + i)]));
      }
    }
  }

  TEST_CASE("synthetic model.bin: values, aliases, metadata") {
    const Ct2ModelBin m = Ct2ModelBin::parse(small_ct2());
    CHECK(m.binary_version == 6);
    CHECK(m.spec_name == "WhisperSpec");
    CHECK(m.spec_revision == 3);
    const Ct2Variable& e = m.tensor("decoder/embeddings/weight", {2, 3});
    CHECK(e.values() == std::vector<float>{1.0f, -2.0f, 0.5f, 0.0f, 65504.0f, -std::ldexp(1.0f, -24)});
    CHECK(&m.get("decoder/projection/weight") == &e);
    CHECK(m.tensor("encoder/conv1/bias", {4}).values()[3] == 8.0f);
    CHECK(m.scalar_int("encoder/num_heads") == 6);
    CHECK(m.scalar_int("decoder/activation") == 3);
    CHECK_THROWS_WITH_AS(m.get("encoder/nope"), doctest::Contains("encoder/nope"), ModelError);
    CHECK_THROWS_WITH_AS(m.tensor("encoder/conv1/bias", {5}), doctest::Contains("[4]"), ModelError);
    CHECK_THROWS_AS(m.tensor("encoder/num_heads", {}), UnsupportedError);

    // take() moves a tensor's elements out, in the file's precision; the variable keeps its shape,
    // and using it again (by name or by alias) is an error, never an empty tensor.
    Ct2ModelBin taken = m;
    const StoredFloats elements = taken.take("decoder/embeddings/weight", {2, 3});
    CHECK(elements.precision() == StoredFloats::Precision::float16);
    CHECK(elements.to_float() == e.values());
    CHECK(taken.get("decoder/embeddings/weight").shape == std::vector<std::int64_t>{2, 3});
    CHECK_THROWS_WITH_AS(taken.take("decoder/projection/weight", {2, 3}), doctest::Contains("already taken"), ModelError);
    CHECK_THROWS_WITH_AS(taken.tensor("decoder/embeddings/weight", {2, 3}), doctest::Contains("already taken"), ModelError);
    CHECK(m.tensor("decoder/embeddings/weight", {2, 3}).values() == e.values());  // the copy was taken from, not m
    CHECK_THROWS_AS(m.scalar_int("encoder/conv1/bias"), ModelError);
  }

  TEST_CASE("bad version, dtype, sizes, quantized models") {
    CHECK_THROWS_WITH_AS(Ct2ModelBin::parse(write_ct2({}, {}, 99)), doctest::Contains("99"), UnsupportedError);
    CHECK_THROWS_AS(Ct2ModelBin::parse(write_ct2({{"x", {1}, 9, {0}}}, {})), UnsupportedError);
    CHECK_THROWS_WITH_AS(Ct2ModelBin::parse(write_ct2({{"x", {3}, 0, raw<float>({1, 2})}}, {})),
                         doctest::Contains("'x' has 8 bytes"), FormatError);
    CHECK_THROWS_AS(Ct2ModelBin::parse(write_ct2({{"x", {1}, 0, raw<float>({1})}, {"x", {1}, 0, raw<float>({1})}}, {})),
                    FormatError);
    CHECK_THROWS_AS(Ct2ModelBin::parse(write_ct2({{"x", {1}, 0, raw<float>({1})}}, {{"y", "z"}})), FormatError);
    CHECK_THROWS_WITH_AS(Ct2ModelBin::parse(write_ct2({{"l/weight", {2, 2}, 1, {1, 2, 3, 4}},
                                                       {"l/weight_scale", {2}, 0, raw<float>({1, 1})}},
                                                      {})),
                         doctest::Contains("quantized"), UnsupportedError);
    auto trailing = small_ct2();
    trailing.push_back(0);
    CHECK_THROWS_AS(Ct2ModelBin::parse(trailing), FormatError);
  }

  TEST_CASE("every truncation throws; random byte flips load or throw") {
    const auto good = small_ct2();
    for (std::size_t n = 0; n < good.size(); ++n) {
      const std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
      CAPTURE(n);
      CHECK_THROWS_AS(Ct2ModelBin::parse(cut), Error);
    }
    whisper_test::Rng rng(11);
    int loaded = 0;
    for (int trial = 0; trial < 5000; ++trial) {
      auto bad = good;
      const int flips = 1 + static_cast<int>(rng.next() % 3);
      for (int k = 0; k < flips; ++k) bad[rng.next() % bad.size()] ^= static_cast<std::uint8_t>(1 + rng.next() % 255);
      try {
        (void)Ct2ModelBin::parse(bad);
        ++loaded;
      } catch (const Error&) {
      }
    }
    MESSAGE(loaded << " of 5000 corrupted files still parsed (flips inside tensor data)");
  }

  TEST_CASE("model assembly refuses rank-0 and out-of-range dimensions (fuzz_loaders regressions)") {
    // Each of these parses (byte counts agree with shapes) and used to get past
    // weights_from_ct2: a scalar encoder-position tensor threw std::out_of_range, a
    // zero-volume [2^31 - 1, 0] one sized the computed sinusoids to 64 GiB, and a
    // [2^31, 0, 3] conv1 made the model width INT_MIN.
    whisper_test::Rng rng(3);
    const auto good = whisper_test::tiny_ct2_vars(whisper_test::tiny_pytorch_model(rng, 300, 8));
    auto load = [](const std::vector<whisper_test::Ct2Var>& vars) {
      return weights_from_ct2(Ct2ModelBin::parse(whisper_test::ct2_bytes(vars, whisper_test::kTinyCt2Aliases).b));
    };
    CHECK(load(good).dims.n_audio_ctx == 1500);
    auto with = [&](const std::string& name, std::vector<std::uint32_t> shape, std::uint8_t dtype, std::vector<std::uint8_t> data) {
      auto vars = good;
      for (auto& v : vars)
        if (v.name == name) v = {name, std::move(shape), dtype, std::move(data)};
      return vars;
    };
    CHECK_THROWS_WITH_AS(load(with("encoder/position_encodings/encodings", {}, 2, raw<std::int16_t>({2}))),
                         doctest::Contains("expected rank 2"), ModelError);
    CHECK_THROWS_WITH_AS(load(with("encoder/position_encodings/encodings", {0x7FFFFFFF, 0}, 0, {})),
                         doctest::Contains("audio context = 2147483647"), ModelError);
    CHECK_THROWS_WITH_AS(load(with("encoder/conv1/weight", {0x80000000u, 0, 3}, 0, {})),
                         doctest::Contains("encoder width = 2147483648"), ModelError);
    CHECK_THROWS_WITH_AS(load(with("decoder/embeddings/weight", {0, 8}, 0, {})), doctest::Contains("vocabulary size = 0"),
                         ModelError);
  }

  TEST_CASE("shape products are checked, never wrapped (issue 11, bug 3)") {
    // 4323 x 7623851 x 1119412321 = 2 * 2^64 + 1: the unchecked 64-bit product wrapped to one
    // element, so four bytes of data loaded as a tensor of that shape (and numel() overflowed).
    CHECK_THROWS_WITH_AS(Ct2ModelBin::parse(write_ct2({{"x", {4323, 7623851, 1119412321}, 0, raw<float>({1})}}, {})),
                         doctest::Contains("'x' has shape [4323, 7623851, 1119412321]"), FormatError);
    // 2^20 x 2^20 x 2^24 = 2^64 wrapped to zero elements, which zero bytes matched.
    CHECK_THROWS_WITH_AS(Ct2ModelBin::parse(write_ct2({{"x", {1u << 20, 1u << 20, 1u << 24}, 0, {}}}, {})),
                         doctest::Contains("[1048576, 1048576, 16777216]"), FormatError);
    // A zero-volume shape whose product fits is a valid empty tensor.
    const Ct2ModelBin empty = Ct2ModelBin::parse(write_ct2({{"x", {1u << 20, 0, 1u << 24}, 0, {}}}, {}));
    CHECK(empty.get("x").numel() == 0);
    CHECK(empty.get("x").elements.size() == 0);
  }

  TEST_CASE("the audio context is Whisper's 1500 frames before anything is sized from it (issue 11, bug 2)") {
    // A zero-volume encoder-position tensor [2^20, 0] passes the parser's byte count. It used to
    // set n_audio_ctx = 2^20 and size the sinusoids (1.6 GB at d = 384) and the cross caches.
    whisper_test::Rng rng(3);
    const auto good = whisper_test::tiny_ct2_vars(whisper_test::tiny_pytorch_model(rng, 300, 8));
    auto load = [](const std::vector<whisper_test::Ct2Var>& vars) {
      return weights_from_ct2(Ct2ModelBin::parse(whisper_test::ct2_bytes(vars, whisper_test::kTinyCt2Aliases).b));
    };
    auto with_positions = [&](std::uint32_t frames, std::uint32_t d) {
      auto vars = good;
      for (auto& v : vars)
        if (v.name == "encoder/position_encodings/encodings")
          v = {v.name, {frames, d}, 0, std::vector<std::uint8_t>(std::size_t{frames} * d * 4)};
      return vars;
    };
    CHECK_THROWS_WITH_AS(load(with_positions(1u << 20, 0)), doctest::Contains("audio context = 1048576"), ModelError);
    CHECK_THROWS_WITH_AS(load(with_positions(1501, 8)), doctest::Contains("audio context = 1501"), ModelError);
    CHECK(load(with_positions(1500, 8)).encoder_positions.rows() == 1500);
  }

  TEST_CASE("a mapped model.bin loads the weights a copy in memory loads, float16 at odd offsets included") {
    whisper_test::Rng rng(11);
    auto vars = whisper_test::tiny_ct2_vars(whisper_test::tiny_pytorch_model(rng, 300, 8));
    for (auto& v : vars)  // float16 where the model ships it, as tiny.en does
      if (v.name == "decoder/embeddings/weight" || v.name.ends_with("ffn/linear_0/weight")) {
        std::vector<std::uint16_t> halfs;
        for (std::size_t i = 0; i < v.data.size(); i += 4) {
          float f;
          std::memcpy(&f, v.data.data() + i, 4);
          halfs.push_back(whisper_test::half_bits(f));
        }
        v = {v.name, v.shape, 4, raw(halfs)};
      }
    // A one-character name first shifts every later tensor to an odd byte offset: the views must
    // not read the elements as aligned halfs or floats (UBSan's alignment check would fail).
    vars.insert(vars.begin(), whisper_test::Ct2Var{"a", {1}, 1, {7}});
    const auto bytes = whisper_test::ct2_bytes(vars, whisper_test::kTinyCt2Aliases).b;
    const whisper_test::TempFile file("mapped_model.bin");
    whisper_test::write_file(file.path(), bytes);

    const WhisperWeights from_memory = weights_from_ct2(Ct2ModelBin::parse(bytes));
    const WhisperWeights mapped = weights_from_ct2(Ct2ModelBin::parse(std::make_shared<const MappedFile>(file.path())));
    REQUIRE(mapped.token_embedding.is_half());
    CHECK(mapped.token_embedding == from_memory.token_embedding);
    CHECK(mapped.encoder[0].fc1.weight.is_half());
    CHECK(mapped.encoder[0].fc1.weight == from_memory.encoder[0].fc1.weight);
    CHECK(mapped.encoder[0].fc2.weight == from_memory.encoder[0].fc2.weight);
    CHECK(mapped.conv1_w == from_memory.conv1_w);
    CHECK(mapped.decoder[0].self_qkv.weight == from_memory.decoder[0].self_qkv.weight);
    CHECK(mapped.decoder[0].cross_kv.bias == from_memory.decoder[0].cross_kv.bias);
    CHECK(mapped.decoder_positions == from_memory.decoder_positions);
    CHECK(mapped.decoder_ln.gamma == from_memory.decoder_ln.gamma);
  }

  TEST_CASE("a mapped tensor's pages leave the resident set once it is taken") {
    // One 8 MiB float16 tensor. Reading it maps its pages in (file-backed resident pages, in
    // /proc/self/statm's resident count); the last StoredFloats holding them releases them.
    using polyattn::testing::resident_bytes;
    if (const char* why = polyattn::testing::resident_memory_unmeasurable()) {
      MESSAGE("skipped: ", why);
      return;
    }
    constexpr std::size_t n = std::size_t{4} << 20;
    const whisper_test::TempFile file("released.bin");
    // "kept" is never taken, so the file stays mapped: only the release can drop w's pages.
    whisper_test::write_file(file.path(), write_ct2({{"w", {std::uint32_t(n)}, 4, std::vector<std::uint8_t>(2 * n, 0x3c)},
                                                     {"kept", {1}, 0, raw<float>({1})}},
                                                    {}));
    std::vector<Eigen::half> out(n);  // committed before the first reading
    const auto resident_mib = [] { return double(resident_bytes()) / double(1 << 20); };
    const double before = resident_mib();
    Ct2ModelBin m = Ct2ModelBin::parse(std::make_shared<const MappedFile>(file.path()));
    // Parsing reads the header only, but the kernel may map a large folio of the page cache
    // around it (2 MiB of this tensor on the Xeon's ext4): what reading adds is what must go.
    const double parsed = resident_mib();
    {
      const StoredFloats w = m.take("w", {std::int64_t(n)});
      w.copy_halfs(out.data());
      CHECK(resident_mib() - before > 7.5);
    }
    CHECK(resident_mib() - parsed < 0.5);
    CHECK(out[n - 1] == Eigen::numext::bit_cast<Eigen::half>(std::uint16_t{0x3c3c}));
  }

  TEST_CASE("a model file that cannot be mapped is an IoError naming it") {
    CHECK_THROWS_WITH_AS(MappedFile("/nonexistent/model.bin"), doctest::Contains("/nonexistent/model.bin"), IoError);
    CHECK_THROWS_WITH_AS(MappedFile(std::filesystem::temp_directory_path().string()), doctest::Contains("not a regular file"), IoError);
    const whisper_test::TempFile empty("empty_model.bin");
    whisper_test::write_file(empty.path(), {});
    CHECK_THROWS_WITH_AS(Ct2ModelBin::parse(std::make_shared<const MappedFile>(empty.path())), doctest::Contains("truncated"), FormatError);
  }

  TEST_CASE("real tiny.en model directory") {
    const std::string dir = whisper_test::model_dir();
    if (!whisper_test::have_file(dir + "/model.bin")) return;
    const Ct2ModelDir d = load_ct2_model_dir(dir);
    CHECK(d.model.spec_name == "WhisperSpec");
    CHECK(d.model.scalar_int("encoder/num_heads") == 6);
    CHECK(d.model.tensor("encoder/conv1/weight", {384, 80, 3}).elements.size() == 384 * 80 * 3);
    CHECK(d.vocabulary.size() == 51864);
    CHECK(d.config.contains("suppress_ids"));
  }
}

TEST_SUITE("json") {
  // config.json and vocabulary.json go through nlohmann::json (parse_json and the typed accessors
  // of ct2_model.hpp); every failure is a FormatError naming the file and field.
  TEST_CASE("parse values, escapes and errors") {
    const Json j = parse_json(R"({"a": [1, -2.5e1, true, null, 1E+2], "s": "x\u00e9\ud83d\ude00\n", "o": {}})", "t.json");
    const Json::array_t& a = json_array(j.at("a"), "a");
    CHECK(a.size() == 5);
    CHECK(a[1].get<double>() == -25.0);
    CHECK(json_string(j.at("s"), "s") == "x\xC3\xA9\xF0\x9F\x98\x80\n");
    CHECK(j.find("missing") == j.end());
    CHECK(json_int(a[0], "x") == 1);
    CHECK(json_int(a[4], "x") == 100);  // an integer-valued number
    CHECK_THROWS_WITH_AS(json_int(a[1], "x", 0, 10), doctest::Contains("x: expected an integer in [0, 10]"), FormatError);
    CHECK_THROWS_WITH_AS(json_int(a[2], "x"), doctest::Contains("x: expected an integer, got boolean"), FormatError);
    CHECK_THROWS_AS(json_int(parse_json("4294967296", "t"), "big"), FormatError);  // beyond int32
    CHECK_THROWS_AS(json_int(parse_json("18446744073709551615", "t"), "big", INT64_MIN, INT64_MAX), FormatError);
    CHECK_THROWS_WITH_AS(json_array(j.at("o"), "t.json: o"), doctest::Contains("t.json: o: expected an array, got object"),
                         FormatError);
    CHECK_THROWS_WITH_AS(json_object(a[3], "n"), doctest::Contains("expected an object, got null"), FormatError);
    CHECK_THROWS_WITH_AS(json_string(a[0], "s"), doctest::Contains("expected a string, got an integer"), FormatError);
    for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "\"\\ud800\"", "01x", "[1e999]", "tru", "\"a", "\"\xff\""}) {
      CAPTURE(bad);
      CHECK_THROWS_WITH_AS(parse_json(bad, "bad.json"), doctest::Contains("bad.json: "), FormatError);
    }
    // Depth limit: nothing recursive can be driven off the stack by the file.
    CHECK_THROWS_WITH_AS(parse_json(std::string(100000, '['), "deep.json"), doctest::Contains("nesting deeper than 128"), FormatError);
    CHECK(parse_json(std::string(129, '[') + std::string(129, ']'), "t").is_array());
    CHECK_THROWS_AS(parse_json(std::string(130, '[') + std::string(130, ']'), "t"), FormatError);
  }

  TEST_CASE("config.json and vocabulary.json: wrong types are FormatErrors naming the file and key") {
    CHECK(parse_ct2_config("{}", "config.json").is_object());
    CHECK_THROWS_WITH_AS(parse_ct2_config("[]", "config.json"), doctest::Contains("config.json: expected an object, got array"),
                         FormatError);
    CHECK_THROWS_WITH_AS(parse_ct2_config("{\"a\": ", "config.json"), doctest::Contains("config.json: [json.exception.parse_error"),
                         FormatError);
    DecodingRules rules;
    rules.suppress = {7};
    apply_ct2_config(parse_ct2_config(R"({"suppress_ids": [1, 2.0, 3]})", "config.json"), "config.json", rules);
    CHECK(rules.suppress == std::vector<int>{1, 2, 3});
    apply_ct2_config(parse_ct2_config(R"({"other": 1})", "config.json"), "config.json", rules);
    CHECK(rules.suppress == std::vector<int>{1, 2, 3});  // absent: kept
    CHECK_THROWS_WITH_AS(apply_ct2_config(parse_ct2_config(R"({"suppress_ids": "1"})", "c.json"), "c.json", rules),
                         doctest::Contains("c.json: suppress_ids: expected an array, got string"), FormatError);
    CHECK_THROWS_WITH_AS(apply_ct2_config(parse_ct2_config(R"({"suppress_ids_begin": [1, "2"]})", "c.json"), "c.json", rules),
                         doctest::Contains("c.json: suppress_ids_begin: expected an integer, got string"), FormatError);
    CHECK_THROWS_WITH_AS(apply_ct2_config(parse_ct2_config(R"({"suppress_ids": [1.5]})", "c.json"), "c.json", rules),
                         doctest::Contains("c.json: suppress_ids: expected an integer in"), FormatError);
    CHECK(parse_vocabulary_json(R"(["a", "\u0120b"])", "v.json") == std::vector<std::string>{"a", "\xC4\xA0" "b"});
    CHECK_THROWS_WITH_AS(parse_vocabulary_json(R"({"a": 1})", "v.json"), doctest::Contains("v.json: expected an array"), FormatError);
    CHECK_THROWS_WITH_AS(parse_vocabulary_json(R"(["a", 2])", "v.json"), doctest::Contains("v.json entry: expected a string"),
                         FormatError);
  }
}

TEST_SUITE("ggml") {
  TEST_CASE("header of for-tests-ggml-tiny.en.bin") {
    const std::string path = whisper_test::data_file("for-tests-ggml-tiny.en.bin");
    if (!whisper_test::have_file(path)) return;
    const GgmlModel m = load_ggml(path, GgmlLoad::header_only);
    const GgmlHparams& h = m.hparams;
    CHECK(h.n_vocab == 51864);
    CHECK(h.n_audio_ctx == 1500);
    CHECK(h.n_audio_state == 384);
    CHECK(h.n_audio_head == 6);
    CHECK(h.n_audio_layer == 4);
    CHECK(h.n_text_ctx == 448);
    CHECK(h.n_text_state == 384);
    CHECK(h.n_text_head == 6);
    CHECK(h.n_text_layer == 4);
    CHECK(h.n_mels == 80);
    CHECK(h.ftype == 1);
    REQUIRE(m.mel_filters.rows() == 80);
    REQUIRE(m.mel_filters.cols() == 201);
    const float err = (m.mel_filters - mel_filters_slaney(16000, 400, 80)).cwiseAbs().maxCoeff();
    MESSAGE("ggml mel filters vs computed: max abs diff " << err);
    CHECK(err < 1e-6f);
    REQUIRE(m.vocabulary.size() == 50257);
    CHECK(m.vocabulary[0] == "!");
    CHECK(m.vocabulary[220] == " ");
    CHECK(m.vocabulary[50256] == "<|endoftext|>");
    CHECK(m.tensors.empty());
    CHECK_THROWS_WITH_AS(load_ggml(path), doctest::Contains("no tensors"), ModelError);
  }

  TEST_CASE("random tensors round trip (f32 and f16)") {
    whisper_test::Rng rng(5);
    whisper_test::GgmlTensorSpec a{"encoder.conv1.weight", {3, 4, 2}, 0, {}};
    whisper_test::GgmlTensorSpec b{"decoder.token_embedding.weight", {4, 5}, 1, {}};
    for (int i = 0; i < 24; ++i) a.data.push_back(rng.normal_ish());
    for (int i = 0; i < 20; ++i) b.data.push_back(static_cast<float>(Eigen::half(rng.normal_ish())));
    const auto bytes = write_ggml({a, b});
    const GgmlModel m = parse_ggml(bytes);
    CHECK(m.hparams.n_vocab == 50300);
    CHECK(m.mel_filters(2, 1) == 5.0f);
    CHECK(m.vocabulary == std::vector<std::string>{"a", " b", "\xC3\xA9"});
    REQUIRE(m.tensors.size() == 2);
    CHECK(m.tensor("encoder.conv1.weight").values() == a.data);
    CHECK(m.tensor("encoder.conv1.weight").shape() == std::vector<std::int64_t>{2, 4, 3});
    CHECK(m.tensor("decoder.token_embedding.weight").values() == b.data);
    CHECK(m.tensor("decoder.token_embedding.weight").type == 1);
    CHECK_THROWS_AS(m.tensor("nope"), ModelError);
    {  // mapped (load_ggml): the same tensors, read in place
      const whisper_test::TempFile file("round_trip.ggml");
      whisper_test::write_file(file.path(), bytes);
      GgmlModel mapped = load_ggml(file.path());
      CHECK(mapped.vocabulary == m.vocabulary);
      CHECK(mapped.mel_filters == m.mel_filters);
      CHECK(mapped.take("encoder.conv1.weight").to_float() == a.data);
      CHECK(mapped.take("decoder.token_embedding.weight").to_float() == b.data);
    }
    GgmlModel taken = m;  // take(): the elements move out in the file's precision, once
    CHECK(taken.take("decoder.token_embedding.weight").precision() == StoredFloats::Precision::float16);
    CHECK(taken.take("encoder.conv1.weight").to_float() == a.data);
    CHECK_THROWS_WITH_AS(taken.take("encoder.conv1.weight"), doctest::Contains("already taken"), ModelError);

    // Truncation: throw, or (cut exactly between tensors) load fewer tensors.
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      const std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
      try {
        const GgmlModel partial = parse_ggml(cut);
        CHECK(partial.tensors.size() < 2);
      } catch (const Error&) {
      }
    }
    for (int trial = 0; trial < 5000; ++trial) {
      auto bad = bytes;
      bad[rng.next() % bad.size()] ^= static_cast<std::uint8_t>(1 + rng.next() % 255);
      try {
        (void)parse_ggml(bad);
      } catch (const Error&) {
      }
    }
    auto bad = bytes;
    bad[0] = 0;
    CHECK_THROWS_WITH_AS(parse_ggml(bad), doctest::Contains("bad magic"), FormatError);
    whisper_test::GgmlTensorSpec q{"x", {2}, 2, {0, 0}};  // Q4_0
    CHECK_THROWS_AS(parse_ggml(write_ggml({q})), UnsupportedError);
  }

  TEST_CASE("tensor element counts are checked, never wrapped (issue 11, bug 3)") {
    // 4323 x 7623851 x 1119412321 = 2 * 2^64 + 1 wrapped to one element: one float loaded as
    // a tensor of that shape. 2^20 x 2^20 x 2^24 = 2^64 wrapped to an empty one.
    whisper_test::GgmlTensorSpec one{"x", {4323, 7623851, 1119412321}, 0, {1.0f}};
    CHECK_THROWS_WITH_AS(parse_ggml(write_ggml({one})), doctest::Contains("[1119412321, 7623851, 4323]"), FormatError);
    whisper_test::GgmlTensorSpec none{"x", {1 << 20, 1 << 20, 1 << 24}, 0, {}};
    CHECK_THROWS_WITH_AS(parse_ggml(write_ggml({none})), doctest::Contains("'x'"), FormatError);
  }

  TEST_CASE("hparams must fit Whisper's architecture before anything is sized from them (issue 11, bug 2)") {
    // n_audio_ctx = 2^20 in the header used to size the sinusoids (and later the cross caches).
    whisper_test::Rng rng(4);
    const auto tensors = whisper_test::tiny_pytorch_model(rng, 300, 8);
    auto with_audio_ctx = [&](std::int32_t n_audio_ctx) {
      whisper_test::Bytes b = whisper_test::tiny_ggml_bytes(tensors, 300, 8);
      std::memcpy(b.b.data() + 8, &n_audio_ctx, 4);  // after the magic and n_vocab
      return parse_ggml(b.b);
    };
    CHECK_THROWS_WITH_AS(weights_from_ggml(with_audio_ctx(1 << 20)), doctest::Contains("audio context = 1048576"), ModelError);
    CHECK_THROWS_WITH_AS(weights_from_ggml(with_audio_ctx(1499)), doctest::Contains("audio context = 1499"), ModelError);
    CHECK(weights_from_ggml(with_audio_ctx(1500)).encoder_positions.rows() == 1500);
  }
}
