#include <doctest/doctest.h>

#include <whisper/ct2_model.hpp>
#include <whisper/ggml_model.hpp>
#include <whisper/tokenizer.hpp>

#include "test_util.hpp"

using namespace polyattn::whisper;

TEST_SUITE("tokenizer") {
  TEST_CASE("byte-to-unicode table") {
    const auto t = gpt2_byte_to_unicode();
    CHECK(t[' '] == U'\u0120');   // "Ġ"
    CHECK(t['\n'] == U'\u010A');  // "Ċ"
    CHECK(t['A'] == U'A');
    CHECK(t[0xAD] == U'\u0143');  // the last byte outside the printable ranges
    CHECK(t[0xE9] == U'\u00E9');
  }

  TEST_CASE("byte-level decoding and special tokens") {
    std::vector<std::string> vocab = {"H", "ello", "\xC4\xA0world", "\xC4\x8A", "\xC3\x83\xC2\xA9", "\xC3\xA2\xC4\xA2",
                                      "<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>", "<|0.00|>"};
    const Tokenizer tok = Tokenizer::from_byte_level(vocab);
    CHECK(tok.special().eot == 6);
    CHECK(tok.special().sot == 7);
    CHECK(tok.special().no_timestamps == 8);
    CHECK(tok.special().timestamp_begin == 9);
    CHECK(tok.special().translate == -1);
    const std::vector<int> ids = {0, 1, 2, 3, 4, 6, 7, 9};
    CHECK(tok.decode(ids) == "Hello world\n\xC3\xA9");
    // Token 5 is the first two bytes of a three-byte character: decoded alone it is invalid.
    const std::vector<int> cut = {5};
    CHECK(tok.decode(cut) == "\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(tok.find(" world") == 2);
    const std::vector<int> out_of_range = {42};
    CHECK_THROWS_AS(tok.decode(out_of_range), Error);
    vocab.push_back("\xE2\x82\xAC");  // a code point outside the byte-level alphabet
    CHECK_THROWS_WITH_AS(Tokenizer::from_byte_level(vocab), doctest::Contains("token 10"), FormatError);
    CHECK_THROWS_WITH_AS(Tokenizer::from_byte_level({"a"}), doctest::Contains("<|endoftext|>"), FormatError);
  }

  TEST_CASE("sanitize_utf8") {
    CHECK(sanitize_utf8("ok \xC3\xA9") == "ok \xC3\xA9");
    CHECK(sanitize_utf8("\xC0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
    CHECK(sanitize_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  }

  TEST_CASE("a ggml n_vocab beyond Whisper's vocabularies is refused before it sizes the tokenizer (fuzz finding)") {
    // fuzz.tokenizer: n_vocab = 838912665 (from a 51-byte input) named that many tokens: 133 MB
    // before the allocation budget stopped it; the file's header bounds n_vocab only by 2^20.
    const std::vector<std::string> raw = {"a", " b"};
    for (const int n_vocab : {51867, 100000}) {
      CAPTURE(n_vocab);
      CHECK_THROWS_WITH_AS(Tokenizer::from_raw_bytes(raw, n_vocab), doctest::Contains(("n_vocab " + std::to_string(n_vocab)).c_str()), FormatError);
    }
    const Tokenizer v3 = Tokenizer::from_raw_bytes(raw, 51866);  // large-v3: 100 languages
    CHECK(v3.size() == 51866);
    CHECK(v3.special().sot == 50258);
    CHECK(v3.token(v3.special().no_timestamps) == "<|notimestamps|>");
  }

  TEST_CASE("ggml vocabulary: whisper.cpp special ids; agrees with the CT2 vocabulary") {
    const std::string path = whisper_test::data_file("for-tests-ggml-tiny.en.bin");
    if (!whisper_test::have_file(path)) return;
    const GgmlModel g = load_ggml(path, GgmlLoad::header_only);
    const Tokenizer raw = Tokenizer::from_raw_bytes(g.vocabulary, g.hparams.n_vocab);
    CHECK(raw.size() == 51864);
    CHECK(raw.special().eot == 50256);
    CHECK(raw.special().sot == 50257);
    CHECK(raw.special().translate == 50357);
    CHECK(raw.special().no_timestamps == 50362);
    CHECK(raw.special().timestamp_begin == 50363);
    CHECK(raw.token(51863) == "<|30.00|>");
    CHECK(raw.find(" ") == 220);
    const std::vector<int> ids = {843, 5891, 460};  // " And", " fellow", " can"
    CHECK(raw.decode(ids) == " And fellow can");

    const std::string dir = whisper_test::model_dir();
    if (!whisper_test::have_file(dir + "/vocabulary.txt")) return;
    const Tokenizer bl = Tokenizer::from_byte_level(load_ct2_model_dir(dir).vocabulary);
    CHECK(bl.size() == raw.size());
    CHECK(bl.special().eot == raw.special().eot);
    CHECK(bl.special().sot == raw.special().sot);
    CHECK(bl.special().translate == raw.special().translate);
    CHECK(bl.special().transcribe == raw.special().transcribe);
    CHECK(bl.special().start_of_lm == raw.special().start_of_lm);
    CHECK(bl.special().start_of_prev == raw.special().start_of_prev);
    CHECK(bl.special().no_speech == raw.special().no_speech);
    CHECK(bl.special().no_timestamps == raw.special().no_timestamps);
    CHECK(bl.special().timestamp_begin == raw.special().timestamp_begin);
    // whisper.cpp's converter stored tokens that are not valid UTF-8 on their own (byte
    // fragments of multi-byte characters) as U+FFFD: those differ, every other token agrees.
    int lossy = 0, differing_valid = 0;
    for (int id = 0; id < 50257; ++id) {
      if (bl.token(id) == raw.token(id)) continue;
      if (sanitize_utf8(bl.token(id)) == bl.token(id)) ++differing_valid;
      else ++lossy;
    }
    MESSAGE(lossy << " byte-fragment tokens are U+FFFD in the ggml vocabulary");
    CHECK(differing_valid == 0);
  }
}
