// Bounded randomized-corruption fuzzing of the Whisper example's loaders (ctest whisper.fuzz).
//
// Valid synthetic inputs (synthetic_files.hpp: WAV files of several formats, a small
// CTranslate2 model.bin, a random-weight Whisper-shaped model as a CTranslate2 directory and
// as a ggml file) are corrupted and fed to the loaders the CLI uses. Each case must load or
// throw a polyattn::whisper::Error: a crash, a sanitizer report, another exception type, or
// one allocation above kMaxAllocation (a corrupt size field believed) fails the run.
//
// Corruptions: byte flips and overwrites (uniform, or next to a header field so that the
// structure is hit rather than the float payload), truncations, insertions, deletions,
// header integers (every integer the writer emitted is a known field) overwritten with 0,
// -1, INT32_MAX, huge and file-size values; for the CTranslate2 model also structural
// edits that keep byte counts consistent (extreme or zero dimensions, reshapes, dtype
// changes, dropped/renamed variables, odd aliases), and for config.json / vocabulary text
// numbers replaced by extreme ones and JSON tokens inserted.
//
// Reproducible: case i of seed s depends on (s, i) only and targets run round-robin, so
//   fuzz_loaders --seed S --case I
// replays one case verbosely and writes its corrupted input next to the temporary files.
//
// Usage: fuzz_loaders [--seconds S] [--seed N] [--iterations N] [--case I] [--target NAME]
//   --seconds: time budget (default POLYATTN_FUZZ_DEFAULT_SECONDS, set by CMake: 20 in
//              optimised builds, 5 under sanitizers; env POLYATTN_FUZZ_SECONDS overrides it)
//   --seed: default from env POLYATTN_FUZZ_SEED, else from the clock (printed either way)
#include <whisper/ct2_model.hpp>
#include <whisper/error.hpp>
#include <whisper/ggml_model.hpp>
#include <whisper/json.hpp>
#include <whisper/model.hpp>
#include <whisper/resample.hpp>
#include <whisper/tokenizer.hpp>
#include <whisper/wav.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <new>
#include <string>
#include <typeinfo>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "synthetic_files.hpp"

#ifndef POLYATTN_FUZZ_DEFAULT_SECONDS
#define POLYATTN_FUZZ_DEFAULT_SECONDS 20
#endif

#if defined(__SANITIZE_ADDRESS__)
#define POLYATTN_FUZZ_ASAN 1
#include <sanitizer/common_interface_defs.h>
#endif

namespace fs = std::filesystem;
namespace pw = polyattn::whisper;
using whisper_test::Bytes;
using whisper_test::Ct2Var;
using whisper_test::Rng;

namespace {

// The largest single allocation a loader may make for these inputs (all under 2 MiB): a
// corrupt count or size believed before it is checked against the bytes shows up as one
// allocation far above it.
constexpr std::size_t kMaxAllocation = std::size_t{64} << 20;

// What is running, for reports from signal handlers and sanitizer death callbacks.
char g_current_case[512] = "(setup)";

void print_current_case() {
  const char prefix[] = "\nfuzz_loaders: died in ";
  [[maybe_unused]] auto r1 = ::write(2, prefix, sizeof prefix - 1);
  [[maybe_unused]] auto r2 = ::write(2, g_current_case, std::strlen(g_current_case));
  [[maybe_unused]] auto r3 = ::write(2, "\n", 1);
}

[[maybe_unused]] void on_fatal_signal(int sig) {
  print_current_case();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

#if defined(POLYATTN_FUZZ_ASAN)
// Under AddressSanitizer its allocator enforces the cap (malloc and Eigen included): an
// allocation above it is a report and the death callback names the case.
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=64:allocator_may_return_null=0"; }
#else
// Without ASan: operator new refuses (abort with the case) anything above the cap. Eigen
// allocates with malloc; RLIMIT_AS, set in main, bounds that instead (bad_alloc, a failure).
// GCC 12 flags free() in a replaced operator delete as mismatched with the (replaced)
// operator new that returned the pointer; the pair is consistent, the warning is wrong here.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (n > kMaxAllocation) {
    std::fprintf(stderr, "\nfuzz_loaders: FAIL: one allocation of %zu bytes (cap %zu) in %s\n", n, kMaxAllocation,
                 g_current_case);
    std::abort();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace {

// ---- mutations ------------------------------------------------------------------------

using Fields = std::vector<Bytes::Field>;

std::uint64_t extreme_value(Rng& rng, std::size_t file_size, std::uint64_t old) {
  const std::uint64_t v[] = {0,
                             1,
                             ~std::uint64_t{0},  // -1 in every width
                             0x7F,
                             0x80,
                             0xFF,
                             0x7FFF,
                             0x8000,
                             0xFFFF,
                             0x7FFFFFFF,
                             0x80000000,
                             0xFFFFFFFE,
                             0x7FFFFFFFFFFFFFFF,
                             std::uint64_t{1} << 40,
                             file_size,
                             file_size + 1,
                             file_size / 2,
                             old + 1,
                             old - 1,
                             old * 2,
                             old << 16,
                             rng.next()};
  return v[rng.next() % std::size(v)];
}

void overwrite(std::vector<std::uint8_t>& b, std::size_t offset, std::size_t width, std::uint64_t value) {
  if (offset >= b.size()) return;
  width = std::min(width, b.size() - offset);
  std::memcpy(b.data() + offset, &value, width);  // little-endian: the low bytes
}

// One random corruption of `b`; `fields` lists its integer header fields (may be empty).
// Returns a description for the verbose replay.
std::string mutate_once(Rng& rng, std::vector<std::uint8_t>& b, const Fields& fields, bool text) {
  const std::size_t n = b.size();
  auto pos_anywhere = [&] { return n ? static_cast<std::size_t>(rng.next() % n) : 0; };
  auto pos = [&] {  // half the time next to a header field: the structure, not the payload
    if (!fields.empty() && rng.next() % 2) {
      const auto& f = fields[rng.next() % fields.size()];
      const std::size_t p = f.offset + static_cast<std::size_t>(rng.next() % (f.size + 8));
      return std::min(p, n ? n - 1 : 0);
    }
    return pos_anywhere();
  };
  const int kind = static_cast<int>(rng.next() % (fields.empty() ? 6 : 8));
  switch (kind) {
    case 0: {  // flip bits of a few bytes
      const int k = 1 + static_cast<int>(rng.next() % 4);
      for (int i = 0; i < k && n; ++i) b[pos()] ^= static_cast<std::uint8_t>(1 + rng.next() % 255);
      return "flip " + std::to_string(k) + " byte(s)";
    }
    case 1: {  // overwrite a byte with a boundary value
      if (!n) return "noop";
      const std::uint8_t vals[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, '"', '\\', '\n', '[', '{', '-', '9'};
      const std::size_t p = pos();
      b[p] = text ? vals[rng.next() % std::size(vals)] : static_cast<std::uint8_t>(rng.next());
      return "set byte " + std::to_string(p);
    }
    case 2: {  // truncate
      const std::size_t keep = n ? static_cast<std::size_t>(rng.next() % n) : 0;
      b.resize(keep);
      return "truncate to " + std::to_string(keep);
    }
    case 3: {  // insert random bytes (or a copy of a nearby run)
      const std::size_t p = n ? pos() : 0, k = 1 + static_cast<std::size_t>(rng.next() % 16);
      std::vector<std::uint8_t> ins(k);
      for (auto& x : ins) x = static_cast<std::uint8_t>(rng.next());
      if (rng.next() % 2 && p + k <= n) std::copy(b.begin() + static_cast<std::ptrdiff_t>(p), b.begin() + static_cast<std::ptrdiff_t>(p + k), ins.begin());
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(p), ins.begin(), ins.end());
      return "insert " + std::to_string(k) + " at " + std::to_string(p);
    }
    case 4: {  // delete a run
      if (!n) return "noop";
      const std::size_t p = pos(), k = std::min<std::size_t>(1 + rng.next() % 16, n - p);
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(p), b.begin() + static_cast<std::ptrdiff_t>(p + k));
      return "delete " + std::to_string(k) + " at " + std::to_string(p);
    }
    case 5: {  // an extreme 1/2/4/8-byte integer at a random offset
      const std::size_t p = pos(), w = std::size_t{1} << (rng.next() % 4);
      overwrite(b, p, w, extreme_value(rng, n, 0));
      return "extreme int" + std::to_string(8 * w) + " at " + std::to_string(p);
    }
    default: {  // an extreme value in a header field, at its own width or wider
      const auto& f = fields[rng.next() % fields.size()];
      std::uint64_t old = 0;
      if (f.offset + f.size <= n) std::memcpy(&old, b.data() + f.offset, f.size);
      const std::size_t w = rng.next() % 4 ? f.size : std::size_t{4};
      const std::uint64_t v = extreme_value(rng, n, old);
      overwrite(b, f.offset, w, v);
      return "field at " + std::to_string(f.offset) + " (" + std::to_string(f.size) + " B) := " + std::to_string(v);
    }
  }
}

std::string mutate(Rng& rng, std::vector<std::uint8_t>& b, const Fields& fields, bool text = false) {
  // Field overwrites first would be nicer (offsets stay valid), but mixed orders also find
  // length fields that disagree with shifted data; keep it simple and random.
  const int k = 1 + static_cast<int>(rng.next() % 4);
  std::string what;
  for (int i = 0; i < k; ++i) what += (i ? "; " : "") + mutate_once(rng, b, fields, text);
  return what;
}

// Text (config.json, vocabulary): replace a number by an extreme one, or insert a JSON token.
std::string mutate_text(Rng& rng, std::vector<std::uint8_t>& b) {
  static const char* const kNumbers[] = {"-1", "0", "2147483647", "-2147483648", "4294967296", "1e308", "1e999",
                                         "1.5", "-0", "99999999999999999999", "51864", "50257"};
  static const char* const kTokens[] = {"\"", "\\u", "\\ud800", "\\udc00x", "[", "]", "{", "}", ",", ":", "null",
                                        "true", "\n", "\r", "\xff", "\xc4", "\xc4\xa0", "<|endoftext|>", "[[[[[[[["};
  if (rng.next() % 2) {
    std::vector<std::pair<std::size_t, std::size_t>> runs;  // digit runs
    for (std::size_t i = 0; i < b.size();) {
      if (b[i] >= '0' && b[i] <= '9') {
        std::size_t j = i;
        while (j < b.size() && b[j] >= '0' && b[j] <= '9') ++j;
        runs.push_back({i, j - i});
        i = j;
      } else {
        ++i;
      }
    }
    if (!runs.empty()) {
      const auto [p, len] = runs[rng.next() % runs.size()];
      const std::string v = kNumbers[rng.next() % std::size(kNumbers)];
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(p), b.begin() + static_cast<std::ptrdiff_t>(p + len));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(p), v.begin(), v.end());
      return "number at " + std::to_string(p) + " := " + v;
    }
  }
  const std::string t = kTokens[rng.next() % std::size(kTokens)];
  const std::size_t p = b.empty() ? 0 : static_cast<std::size_t>(rng.next() % (b.size() + 1));
  b.insert(b.begin() + static_cast<std::ptrdiff_t>(p), t.begin(), t.end());
  return "insert token at " + std::to_string(p);
}

// Structural edits of a CTranslate2 variable list that keep each variable's byte count
// consistent with its shape (so that the parser accepts them and the model assembly sees
// extreme dimensions), where the byte count stays small.
std::string mutate_ct2_vars(Rng& rng, std::vector<Ct2Var>& vars, std::vector<std::pair<std::string, std::string>>& aliases) {
  static constexpr std::size_t kItem[] = {4, 1, 2, 4, 2, 2};
  auto resize_data = [&](Ct2Var& v) {
    // Up to 1 MiB of bytes is materialised (the harness's own inputs stay far below the
    // allocation cap); beyond, the byte count is left to disagree with the shape.
    std::uint64_t numel = 1;
    for (auto d : v.shape) {
      numel *= d;
      if (numel * kItem[v.dtype] > (std::uint64_t{1} << 20)) return;
    }
    v.data.resize(static_cast<std::size_t>(numel * kItem[v.dtype]));
  };
  if (vars.empty()) return "noop";
  Ct2Var& v = vars[rng.next() % vars.size()];
  const std::uint32_t extremes[] = {0, 1, 2, 3, 7, 64, 448, 1500, 65536, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF};
  auto extreme = [&] { return extremes[rng.next() % std::size(extremes)]; };
  switch (rng.next() % 9) {
    case 0: {  // one dimension extreme, bytes resized when they fit
      if (v.shape.empty()) v.shape.push_back(1);
      auto& d = v.shape[rng.next() % v.shape.size()];
      d = extreme();
      resize_data(v);
      return "'" + v.name + "': a dimension := " + std::to_string(d);
    }
    case 1: {  // zero volume: one dimension 0, another extreme, no bytes
      if (v.shape.size() < 2) v.shape.resize(2, 1);
      const std::size_t i = rng.next() % v.shape.size(), j = (i + 1) % v.shape.size();
      v.shape[i] = 0;
      v.shape[j] = extreme();
      v.data.clear();
      return "'" + v.name + "': zero volume with a dimension " + std::to_string(v.shape[j]);
    }
    case 2: {  // reshape, same element count: flat, scalar, leading 1, reversed
      std::uint64_t numel = 1;
      for (auto d : v.shape) numel *= d;
      switch (rng.next() % 4) {
        case 0: v.shape = {static_cast<std::uint32_t>(numel)}; break;
        case 1: if (numel == 1) v.shape.clear(); break;
        case 2: v.shape.insert(v.shape.begin(), 1); break;
        default: std::reverse(v.shape.begin(), v.shape.end()); break;
      }
      return "'" + v.name + "': reshaped to rank " + std::to_string(v.shape.size());
    }
    case 3: {  // another dtype, bytes resized
      v.dtype = static_cast<std::uint8_t>(rng.next() % 6);
      resize_data(v);
      return "'" + v.name + "': dtype := " + std::to_string(v.dtype);
    }
    case 4: {  // an integer scalar set to an extreme (head counts)
      for (auto& x : vars)
        if (x.dtype == 2 && x.data.size() == 2) {
          const std::int16_t vals[] = {0, -1, 1, 3, 7, 32767, -32768};
          const std::int16_t val = vals[rng.next() % std::size(vals)];
          std::memcpy(x.data.data(), &val, 2);
          return "'" + x.name + "' := " + std::to_string(val);
        }
      return "noop";
    }
    case 5: {  // drop a variable
      const std::string name = v.name;
      vars.erase(vars.begin() + (&v - vars.data()));
      return "dropped '" + name + "'";
    }
    case 6: {  // rename a variable (layer counts come from names)
      const std::string old = v.name;
      const char* names[] = {"encoder/layer_1/ffn/linear_0/weight", "decoder/layer_7/ffn/linear_0/weight",
                             "encoder/num_heads", "decoder/activation", "decoder/scale_embeddings", "x"};
      v.name = names[rng.next() % std::size(names)];
      return "renamed '" + old + "' to '" + v.name + "'";
    }
    case 7: {  // swap the shapes (and bytes) of two variables
      Ct2Var& w = vars[rng.next() % vars.size()];
      std::swap(v.shape, w.shape);
      std::swap(v.data, w.data);
      std::swap(v.dtype, w.dtype);
      return "swapped '" + v.name + "' and '" + w.name + "'";
    }
    default: {  // an alias pointing elsewhere, or named like a variable
      const Ct2Var& w = vars[rng.next() % vars.size()];
      if (rng.next() % 2) aliases.push_back({w.name, v.name});
      else aliases.push_back({"decoder/embeddings/weight", w.name});
      return "alias '" + aliases.back().first + "' -> '" + aliases.back().second + "'";
    }
  }
}

// ---- targets --------------------------------------------------------------------------

struct Outcome {
  std::size_t cases = 0, loaded = 0;
  std::map<std::string, std::size_t> rejected;  // by Error subclass
};

struct Target {
  std::string name;
  // Builds the corrupted input of a case (writing files where the loader reads files),
  // returns a description; then `run` loads it.
  std::function<std::string(Rng&)> corrupt;
  std::function<void()> run;
  std::function<void(const std::string&)> save;  // writes the corrupted input for a replay
};

std::string error_kind(const pw::Error& e) {
  if (dynamic_cast<const pw::FormatError*>(&e)) return "FormatError";
  if (dynamic_cast<const pw::UnsupportedError*>(&e)) return "UnsupportedError";
  if (dynamic_cast<const pw::ModelError*>(&e)) return "ModelError";
  if (dynamic_cast<const pw::IoError*>(&e)) return "IoError";
  return "Error";
}

// UTF-8 of a code point below U+0800 (the GPT-2 byte alphabet tops out at U+0143).
std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A byte-level vocabulary: the 256 byte tokens, then Whisper's special tokens.
std::vector<std::string> tiny_vocabulary() {
  std::vector<std::string> v;
  for (const char32_t cp : pw::gpt2_byte_to_unicode()) v.push_back(utf8(cp));
  for (const char* s : {"<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
                        "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>", "<|0.00|>", "<|0.02|>"})
    v.push_back(s);
  return v;
}

std::vector<std::uint8_t> text_bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

int main(int argc, char** argv) {
  double seconds = POLYATTN_FUZZ_DEFAULT_SECONDS;
  if (const char* e = std::getenv("POLYATTN_FUZZ_SECONDS")) seconds = std::atof(e);
  std::uint64_t seed = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  if (const char* e = std::getenv("POLYATTN_FUZZ_SEED")) seed = std::strtoull(e, nullptr, 0);
  std::int64_t only_case = -1, max_iterations = 0;
  std::string only_target;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s [--seconds S] [--seed N] [--iterations N] [--case I] [--target NAME]\n", argv[0]);
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--seconds") seconds = std::atof(v);
    else if (a == "--seed") seed = std::strtoull(v, nullptr, 0);
    else if (a == "--iterations") max_iterations = std::atoll(v);
    else if (a == "--case") only_case = std::atoll(v);
    else if (a == "--target") only_target = v;
    else {
      std::fprintf(stderr, "fuzz_loaders: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }

#if defined(POLYATTN_FUZZ_ASAN)
  __sanitizer_set_death_callback(print_current_case);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
  // Bounds malloc (Eigen) where operator new's cap does not reach: a huge request fails
  // with bad_alloc, which counts as a failure below.
  const rlimit as{rlim_t{4} << 30, rlim_t{4} << 30};
  setrlimit(RLIMIT_AS, &as);
#endif

  const fs::path tmp = fs::temp_directory_path() / ("polyattn_fuzz_loaders_" + std::to_string(::getpid()));
  fs::create_directories(tmp);

  // -- valid inputs --
  Rng setup_rng(1234);  // fixed: the valid inputs are the same in every run
  std::vector<Bytes> wavs;
  {
    std::vector<std::int16_t> s(64);
    for (auto& x : s) x = static_cast<std::int16_t>(setup_rng.next());
    Bytes f32;
    for (int i = 0; i < 32; ++i) f32.put(setup_rng.normal_ish());
    std::vector<std::uint8_t> b24(48), b8(20);
    for (auto& x : b24) x = static_cast<std::uint8_t>(setup_rng.next());
    for (auto& x : b8) x = static_cast<std::uint8_t>(setup_rng.next());
    Bytes f64;
    for (int i = 0; i < 8; ++i) f64.put(static_cast<double>(setup_rng.normal_ish()));
    wavs.push_back(whisper_test::wav_bytes(1, 1, 16000, 16, whisper_test::pcm16(s)));        // PCM16 mono
    wavs.push_back(whisper_test::wav_bytes(3, 2, 16000, 32, f32.b));                        // float32 stereo
    wavs.push_back(whisper_test::wav_bytes(1, 2, 44100, 16, whisper_test::pcm16(s), true));  // EXTENSIBLE, resampled
    wavs.push_back(whisper_test::wav_bytes(3, 1, 8000, 32, f32.b, true));                   // EXTENSIBLE float
    wavs.push_back(whisper_test::wav_bytes(1, 2, 22050, 24, b24));                           // PCM24 stereo
    wavs.push_back(whisper_test::wav_bytes(1, 1, 16000, 8, b8));                             // PCM8
    wavs.push_back(whisper_test::wav_bytes(3, 1, 16000, 64, f64.b));                         // float64
  }
  const Bytes small_ct2 = whisper_test::small_ct2_bytes();
  Bytes small_ggml;
  {
    pw::GgmlTensor a{"encoder.conv1.weight", {3, 4, 2}, 0, {}};
    pw::GgmlTensor b{"decoder.token_embedding.weight", {4, 5}, 1, {}};
    for (int i = 0; i < 24; ++i) a.data.push_back(setup_rng.normal_ish());
    for (int i = 0; i < 20; ++i) b.data.push_back(setup_rng.normal_ish());
    small_ggml = whisper_test::ggml_bytes({a, b});
  }
  // A Whisper-shaped CTranslate2 directory the CLI path loads completely (weights, tokenizer,
  // rules): byte-level vocabulary of 267 tokens, d = 8.
  const std::vector<std::string> vocab = tiny_vocabulary();
  const int ct2_vocab = static_cast<int>(vocab.size());
  const std::vector<Ct2Var> ct2_vars = whisper_test::tiny_ct2_vars(whisper_test::tiny_pytorch_model(setup_rng, ct2_vocab, 8));
  const Bytes ct2_bin = whisper_test::ct2_bytes(ct2_vars, whisper_test::kTinyCt2Aliases);
  const std::string config = R"({"alignment_heads": [[0, 1]], "lang_ids": [258], "suppress_ids": [1, 2, 259, 260],)"
                             R"( "suppress_ids_begin": [32, 256]})";
  std::string vocab_txt, vocab_json = "[";
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    vocab_txt += vocab[i] + "\n";
    std::string esc;
    for (const char c : vocab[i]) esc += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    vocab_json += (i ? ", \"" : "\"") + esc + "\"";
  }
  vocab_json += "]";
  const fs::path dir_txt = tmp / "ct2_txt", dir_json = tmp / "ct2_json";
  fs::create_directories(dir_txt);
  fs::create_directories(dir_json);
  auto write_dir = [&](const fs::path& dir, bool json_vocab) {
    whisper_test::write_file((dir / "model.bin").string(), ct2_bin.b);
    whisper_test::write_file((dir / "config.json").string(), text_bytes(config));
    if (json_vocab) whisper_test::write_file((dir / "vocabulary.json").string(), text_bytes(vocab_json));
    else whisper_test::write_file((dir / "vocabulary.txt").string(), text_bytes(vocab_txt));
  };
  write_dir(dir_txt, false);
  write_dir(dir_json, true);
  // The same kind of model as a ggml file (raw-byte vocabulary needs n_vocab >= 50364, so d = 4).
  const Bytes ggml_model = whisper_test::tiny_ggml_bytes(whisper_test::tiny_pytorch_model(setup_rng, 50364, 4), 50364, 4);
  const fs::path ggml_path = tmp / "model.ggml.bin";

  // Every valid input must load: otherwise the fuzzing would only exercise early rejections.
  try {
    for (const Bytes& w : wavs) (void)pw::parse_wav(w.b);
    (void)pw::Ct2ModelBin::parse(small_ct2.b);
    (void)pw::parse_ggml(small_ggml.b);
    (void)pw::WhisperModel::load_ct2(dir_txt);
    (void)pw::WhisperModel::load_ct2(dir_json);
    whisper_test::write_file(ggml_path.string(), ggml_model.b);
    (void)pw::WhisperModel::load_ggml_file(ggml_path.string());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_loaders: FAIL: a valid synthetic input does not load: %s\n", e.what());
    return 1;
  }

  // -- targets --
  std::vector<std::uint8_t> cur;  // the corrupted in-memory input of the current case
  std::function<void()> restore;  // undoes a corrupted file on disk
  auto mem_save = [&](const std::string& path) {
    whisper_test::write_file(path, cur);
    std::fprintf(stderr, "  corrupted input: %s\n", path.c_str());
  };
  std::vector<Target> targets;
  targets.push_back({"wav",
                     [&](Rng& rng) {
                       const Bytes& w = wavs[rng.next() % wavs.size()];
                       cur = w.b;
                       return mutate(rng, cur, w.fields);
                     },
                     [&] {
                       const pw::WavAudio a = pw::parse_wav(cur);
                       if (a.info.sample_rate != pw::kWhisperSampleRate)
                         (void)pw::resample(a.samples, a.info.sample_rate, pw::kWhisperSampleRate);
                     },
                     mem_save});
  targets.push_back({"ct2.bin",
                     [&](Rng& rng) {
                       cur = small_ct2.b;
                       return mutate(rng, cur, small_ct2.fields);
                     },
                     [&] { (void)pw::Ct2ModelBin::parse(cur); }, mem_save});
  fs::path ct2_dir;
  targets.push_back({"ct2.dir",
                     [&](Rng& rng) {
                       const bool json_vocab = rng.next() % 2;
                       ct2_dir = json_vocab ? dir_json : dir_txt;
                       const unsigned pick = static_cast<unsigned>(rng.next() % 20);
                       std::string file, what;
                       if (pick < 9) {
                         file = "model.bin";
                         cur = ct2_bin.b;
                         what = mutate(rng, cur, ct2_bin.fields);
                       } else if (pick < 14) {
                         file = "model.bin";
                         auto vars = ct2_vars;
                         auto aliases = whisper_test::kTinyCt2Aliases;
                         const int k = 1 + static_cast<int>(rng.next() % 3);
                         for (int i = 0; i < k; ++i) what += (i ? "; " : "") + mutate_ct2_vars(rng, vars, aliases);
                         cur = whisper_test::ct2_bytes(vars, aliases).b;
                       } else {
                         const bool cfg = pick < 17;
                         file = cfg ? "config.json" : json_vocab ? "vocabulary.json" : "vocabulary.txt";
                         cur = text_bytes(cfg ? config : json_vocab ? vocab_json : vocab_txt);
                         const int k = 1 + static_cast<int>(rng.next() % 3);
                         for (int i = 0; i < k; ++i)
                           what += (i ? "; " : "") + (rng.next() % 3 ? mutate_text(rng, cur) : mutate(rng, cur, {}, true));
                       }
                       const fs::path path = ct2_dir / file;
                       whisper_test::write_file(path.string(), cur);
                       restore = [&, json_vocab] { write_dir(json_vocab ? dir_json : dir_txt, json_vocab); };
                       return file + ": " + what;
                     },
                     [&] { (void)pw::WhisperModel::load_ct2(ct2_dir); },
                     [&](const std::string&) { std::fprintf(stderr, "  corrupted directory: %s\n", ct2_dir.c_str()); }});
  targets.push_back({"ggml",
                     [&](Rng& rng) {
                       cur = small_ggml.b;
                       return mutate(rng, cur, small_ggml.fields);
                     },
                     [&] {
                       (void)pw::parse_ggml(cur, pw::GgmlLoad::header_only);
                       (void)pw::parse_ggml(cur);
                     },
                     mem_save});
  targets.push_back({"ggml.model",
                     [&](Rng& rng) {
                       cur = ggml_model.b;
                       const std::string what = mutate(rng, cur, ggml_model.fields);
                       whisper_test::write_file(ggml_path.string(), cur);
                       return what;
                     },
                     [&] { (void)pw::WhisperModel::load_ggml_file(ggml_path.string()); },
                     [&](const std::string&) { std::fprintf(stderr, "  corrupted file: %s\n", ggml_path.c_str()); }});

  const std::size_t n_targets = targets.size();
  std::vector<Outcome> outcomes(n_targets);
  auto case_seed = [&](std::int64_t i) { return Rng(seed ^ (0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(i + 1))).next(); };
  auto run_case = [&](std::int64_t i, bool verbose) {
    const std::size_t t_index = static_cast<std::size_t>(i) % n_targets;
    if (!only_target.empty() && targets[t_index].name != only_target) return true;
    Target& t = targets[t_index];
    Outcome& out = outcomes[t_index];
    std::snprintf(g_current_case, sizeof g_current_case, "target %s, case %lld of seed %llu (replay: --seed %llu --case %lld)",
                  t.name.c_str(), static_cast<long long>(i), static_cast<unsigned long long>(seed),
                  static_cast<unsigned long long>(seed), static_cast<long long>(i));
    Rng rng(case_seed(i));
    restore = nullptr;
    const std::string what = t.corrupt(rng);
    if (verbose) {
      std::fprintf(stderr, "%s\n  corruption: %s\n", g_current_case, what.c_str());
      t.save((tmp / "case_input.bin").string());
    }
    ++out.cases;
    bool ok = true;
    try {
      t.run();
      ++out.loaded;
      if (verbose) std::fprintf(stderr, "  loaded\n");
    } catch (const pw::Error& e) {
      ++out.rejected[error_kind(e)];
      if (verbose) std::fprintf(stderr, "  %s: %s\n", error_kind(e).c_str(), e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_loaders: FAIL: %s threw %s (not a polyattn::whisper::Error): %s\n  corruption: %s\n",
                   g_current_case, typeid(e).name(), e.what(), what.c_str());
      ok = false;
    } catch (...) {
      std::fprintf(stderr, "fuzz_loaders: FAIL: %s threw a non-std exception\n  corruption: %s\n", g_current_case, what.c_str());
      ok = false;
    }
    if (!ok) t.save((tmp / "case_input.bin").string());
    else if (!verbose && restore) restore();
    return ok;
  };

  std::fprintf(stderr, "fuzz_loaders: seed %llu, budget %.1f s, %zu targets\n", static_cast<unsigned long long>(seed), seconds,
               n_targets);
  if (only_case >= 0) {
    const bool ok = run_case(only_case, true);
    std::fprintf(stderr, "files kept under %s\n", tmp.c_str());
    return ok ? 0 : 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::int64_t i = 0;
  for (; (i < static_cast<std::int64_t>(n_targets) || elapsed() < seconds) && (max_iterations <= 0 || i < max_iterations); ++i) {
    if (!run_case(i, false)) {
      std::fprintf(stderr, "fuzz_loaders: FAIL after %lld cases; input kept under %s\n", static_cast<long long>(i + 1), tmp.c_str());
      return 1;
    }
  }
  std::snprintf(g_current_case, sizeof g_current_case, "(summary)");
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("fuzz_loaders: seed %llu: %lld cases in %.1f s, all loaded or threw polyattn::whisper::Error; peak RSS %.1f MiB\n",
              static_cast<unsigned long long>(seed), static_cast<long long>(i), elapsed(),
              static_cast<double>(u.ru_maxrss) / 1024.0);
  for (std::size_t k = 0; k < n_targets; ++k) {
    const Outcome& o = outcomes[k];
    std::string rej;
    for (const auto& [kind, count] : o.rejected) rej += " " + kind + " " + std::to_string(count);
    std::printf("  %-10s %7zu cases: %6zu loaded, rejected:%s\n", targets[k].name.c_str(), o.cases, o.loaded, rej.c_str());
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return 0;
}
