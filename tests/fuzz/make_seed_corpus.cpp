// Writes the fuzz harnesses' seed corpus: small valid inputs of every format, built by the
// synthetic-file writers the Whisper tests use (tests/whisper/synthetic_files.hpp), so that the
// fuzzer starts past the magic numbers and length fields. Deterministic: ctest
// fuzz.seed_corpus_up_to_date checks that the committed files are what this program writes.
//
//   make_seed_corpus DIR    writes DIR/<harness>/gen-<name> (tests/fuzz/corpus is the committed copy)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "synthetic_files.hpp"

namespace fs = std::filesystem;
using whisper_test::Bytes;
using whisper_test::Rng;

namespace {

std::vector<std::uint8_t> text(const std::string& s) { return {s.begin(), s.end()}; }

std::string vocabulary_txt(const std::vector<std::string>& vocab, const char* line_end) {
  std::string out;
  for (const std::string& t : vocab) out += t + line_end;
  return out;
}

std::string vocabulary_json(const std::vector<std::string>& vocab) {
  std::string out = "[";
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    std::string escaped;
    for (const char c : vocab[i]) escaped += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    out += (i ? ", \"" : "\"") + escaped + "\"";
  }
  return out + "]";
}

// fuzz_tokenizer.cpp's input: form byte, n_vocab, '\n'-separated tokens, NUL, i32 ids.
std::vector<std::uint8_t> tokenizer_input(bool raw_form, std::int32_t n_vocab, const std::vector<std::string>& vocab,
                                          const std::vector<std::int32_t>& ids) {
  Bytes b;
  b.put<std::uint8_t>(raw_form ? 1 : 0).put(n_vocab);
  for (std::size_t i = 0; i < vocab.size(); ++i) b.str((i ? "\n" : "") + vocab[i]);
  b.put<std::uint8_t>(0);
  for (const std::int32_t id : ids) b.put(id);
  return b.b;
}

// The random Whisper-shaped model (d = 4, vocabulary 16) without the encoder positions, which the
// ggml loader recomputes (1500 x d floats the seed need not carry).
std::vector<whisper_test::TinyTensor> small_whisper_model(Rng& rng) {
  std::vector<whisper_test::TinyTensor> tensors = whisper_test::tiny_pytorch_model(rng, 16, 4);
  std::erase_if(tensors, [](const auto& t) { return t.name == "encoder.positional_embedding"; });
  return tensors;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  int written = 0;
  auto write = [&](const std::string& harness, const std::string& name, const std::vector<std::uint8_t>& bytes) {
    fs::create_directories(out / harness);
    whisper_test::write_file((out / harness / ("gen-" + name)).string(), bytes);
    ++written;
  };

  // ct2_model_bin: every dtype and an alias; the oldest binary version; a Whisper model with
  // encoder positions, without, and with a zero-volume positions tensor (only its length is read);
  // a quantized model (refused by name).
  Rng rng(1234);
  write("ct2_model_bin", "dtypes-and-alias", whisper_test::small_ct2());
  write("ct2_model_bin", "version-4", whisper_test::ct2_bytes({{"x", {2}, 0, whisper_test::raw<float>({1, 2})}}, {}, 4).b);
  auto whisper_vars = whisper_test::tiny_ct2_vars(whisper_test::tiny_pytorch_model(rng, 16, 4));
  write("ct2_model_bin", "whisper-d4-with-positions", whisper_test::ct2_bytes(whisper_vars, whisper_test::kTinyCt2Aliases).b);
  for (auto& v : whisper_vars)
    if (v.name == "encoder/position_encodings/encodings") v = {v.name, {1500, 0}, 0, {}};
  write("ct2_model_bin", "whisper-d4-empty-positions", whisper_test::ct2_bytes(whisper_vars, whisper_test::kTinyCt2Aliases).b);
  std::erase_if(whisper_vars, [](const auto& v) { return v.name == "encoder/position_encodings/encodings"; });
  write("ct2_model_bin", "whisper-d4", whisper_test::ct2_bytes(whisper_vars, whisper_test::kTinyCt2Aliases).b);
  write("ct2_model_bin", "quantized",
        whisper_test::write_ct2({{"l/weight", {2, 2}, 1, {1, 2, 3, 4}}, {"l/weight_scale", {2}, 0, whisper_test::raw<float>({1, 1})}}, {}));

  // ct2_vocabulary: the byte-level alphabet and Whisper's special tokens, in both file forms.
  const std::vector<std::string> vocab = whisper_test::byte_level_vocabulary();
  write("ct2_vocabulary", "vocabulary.txt", text(vocabulary_txt(vocab, "\n")));
  write("ct2_vocabulary", "vocabulary-crlf.txt", text(vocabulary_txt(vocab, "\r\n")));
  write("ct2_vocabulary", "vocabulary.json", text(vocabulary_json(vocab)));

  // ct2_config: the keys of tiny.en's config.json (synthetic values), and JSON's corners.
  write("ct2_config", "config.json",
        text(R"({"alignment_heads": [[0, 1], [2, 3]], "lang_ids": [258], "suppress_ids": [1, 2, 259, 260],)"
             R"( "suppress_ids_begin": [32, 256]})"));
  write("ct2_config", "values.json", text(R"({"s": "x\u00e9\ud83d\ude00\n\"\\\/", "n": [-2.5e1, 0, 1E+2, true, false, null], "o": {"a": {}}})"));

  // ggml: header, filters and vocabulary only; two tensors (f32, f16); a Whisper model.
  write("ggml", "header-only", whisper_test::write_ggml({}));
  {
    whisper_test::GgmlTensorSpec a{"encoder.conv1.weight", {3, 4, 2}, 0, {}};
    whisper_test::GgmlTensorSpec b{"decoder.token_embedding.weight", {4, 5}, 1, {}};
    for (int i = 0; i < 24; ++i) a.data.push_back(rng.normal_ish());
    for (int i = 0; i < 20; ++i) b.data.push_back(rng.normal_ish());
    write("ggml", "f32-and-f16", whisper_test::write_ggml({a, b}));
  }
  write("ggml", "whisper-d4", whisper_test::tiny_ggml(small_whisper_model(rng), 16, 4));

  // tokenizer: a byte-level vocabulary; raw ggml tokens (English-only and multilingual ids).
  write("tokenizer", "byte-level", tokenizer_input(false, 0, vocab, {39, 68, 0, 256, 257, 264, 266, 195, 40}));
  const std::vector<std::string> raw = {"a", " b", "\xC3\xA9", "\xE2\x82", "<|endoftext|>"};
  write("tokenizer", "raw-english", tokenizer_input(true, 51864, raw, {0, 1, 2, 3, 50256, 50363, 51863}));
  write("tokenizer", "raw-multilingual", tokenizer_input(true, 51865, raw, {1, 3, 2, 50257, 50364}));

  // wav: every sample format, EXTENSIBLE headers, several rates (one prime to 16 kHz) and channel counts.
  {
    std::vector<std::int16_t> s(64);
    for (auto& x : s) x = static_cast<std::int16_t>(rng.next());
    Bytes f32, f64;
    for (int i = 0; i < 32; ++i) f32.put(rng.normal_ish());
    for (int i = 0; i < 8; ++i) f64.put(static_cast<double>(rng.normal_ish()));
    std::vector<std::uint8_t> b24(48), b8(20);
    for (auto& x : b24) x = static_cast<std::uint8_t>(rng.next());
    for (auto& x : b8) x = static_cast<std::uint8_t>(rng.next());
    write("wav", "pcm16-mono", whisper_test::make_wav(1, 1, 16000, 16, whisper_test::pcm16(s)));
    write("wav", "float32-stereo", whisper_test::make_wav(3, 2, 16000, 32, f32.b));
    write("wav", "extensible-pcm16-44100", whisper_test::make_wav(1, 2, 44100, 16, whisper_test::pcm16(s), true));
    write("wav", "extensible-float32-8000", whisper_test::make_wav(3, 1, 8000, 32, f32.b, true));
    write("wav", "pcm24-stereo-22050", whisper_test::make_wav(1, 2, 22050, 24, b24));
    write("wav", "pcm8", whisper_test::make_wav(1, 1, 16000, 8, b8));
    write("wav", "float64", whisper_test::make_wav(3, 1, 16000, 64, f64.b));
    write("wav", "pcm8-767999hz", whisper_test::make_wav(1, 1, 767999, 8, {128, 130, 126, 129}));  // no common divisor with 16 kHz
  }
  std::printf("make_seed_corpus: %d files under %s\n", written, out.c_str());
  return 0;
}
