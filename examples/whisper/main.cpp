// whisper: transcribe audio files (any format libsndfile reads: WAV, FLAC, Ogg, ...) with the
// Whisper tiny.en model in CTranslate2 format (examples/whisper/fetch_model.sh) or a whisper.cpp
// ggml file, decoding all files as one
// batch through the decoder attention policies named by --self and --cross, their attention on
// the CPU or (whisper_cuda, --device cuda) on a CUDA GPU. This file is compiled by the C++
// compiler for both executables; the CUDA policies live in cuda_backend.cu (backend.hpp).
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>  // mallopt
#endif
#include <sys/resource.h>
#include <unistd.h>

#include <whisper/backend.hpp>
#include <whisper/model.hpp>
#include <whisper/onednn_bf16_dense.hpp>
#include <whisper/onednn_int8_dense.hpp>
#include <whisper/audio.hpp>
#include <whisper/output_formats.hpp>

namespace {

namespace pw = polyattn::whisper;

[[noreturn]] void usage(const char* argv0, const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "error: %s\n", error.c_str());
  const pw::Backend* cuda = pw::cuda_backend();
  const std::string cuda_policies =
      cuda ? "  --self, --cross with --device cuda (default mha/hnd, baseline); instantiated:\n      " + cuda->available_policies() + "\n"
           : std::string();
  std::fprintf(stderr,
               "usage: %s --model DIR|FILE.bin --audio FILE [FILE...] [--device cpu|cuda] [--self NAME] [--cross NAME] "
               "[--threads N] [--batch N] [--beam-size N] [--patience F] [--length-penalty F] [--timestamps on|off]\n"
               "       [--condition-on-previous-text on|off] [--temperature-fallback on|off] [--seed N] [--output-format F[,F...]]\n"
               "       [--output-dir DIR] [--tokens] [--compute-type float32|bfloat16|int8]\n"
               "       %s [--device cpu|cuda] --list-policies   (one instantiated 'SELF CROSS' pair per line)\n"
               "  DIR: a CTranslate2 Whisper model directory (model.bin, config.json, vocabulary.txt)\n"
               "  FILE.bin: a whisper.cpp ggml model (f32/f16)\n"
               "  --device: where the model runs (default cpu). cuda: the decoder's attention (self and cross) on\n"
               "      the GPU through exec::Cuda, the encoder's and the decoder's products through cuBLAS; LayerNorm,\n"
               "      GELU and the projections inside the library's cross-attention stay on the CPU. %s\n"
               "  --self, --cross: decoder attention policies (default mha/paged16, baseline); instantiated:\n"
               "      %s\n"
               "%s"
               "  --threads N: Eigen and CPU attention threads (default: every CPU the process may run on)\n"
               "  --batch N: 30 s windows decoded at once (default 16; all files' windows share the batch)\n"
               "  --beam-size N: beams per window (default 5; 1 is greedy decoding), with CTranslate2's rules; the beams\n"
               "      of a window share its cross cache, and on a paged self-attention layout the pages of their common tokens\n"
               "  --patience F: a window's search ends after round(N * F) finished hypotheses (default 1)\n"
               "  --length-penalty F: hypotheses are ranked by log-prob / length^F (default 1)\n"
               "  --timestamps on|off: on (default), openai-whisper's long-form transcription: timestamp tokens, segments,\n"
               "      each window starting where the last complete segment ended; off, consecutive 30 s windows decoded\n"
               "      independently without timestamps (CTranslate2's generate with <|notimestamps|>)\n"
               "  --condition-on-previous-text on|off: prompt each window with the text before it (default on; timestamps on)\n"
               "  --temperature-fallback on|off: decode a window again at temperature 0.2, 0.4, ... 1.0 (best of 5 samples)\n"
               "      while its text repeats itself or is unlikely (default on); off: temperature 0 only\n"
               "  --seed N: of the samples drawn at temperatures above 0 (default 0): a run repeats exactly\n"
               "  --output-format F[,F...]: also write each transcript as txt, srt, vtt, json or all, named after the audio\n"
               "      file (jfk.wav gives jfk.srt) in --output-dir (default .)\n"
               "  --tokens: after each transcript, print the sampled token ids as 'FILE:tokens: ID ID ...'\n"
               "  --compute-type float32|bfloat16|int8: the arithmetic of the stored linear layers (the encoder's, the decoder's\n"
               "      MLP and self-attention projections). float32 (default): float multiply and add. bfloat16 (--device cpu only):\n"
               "      weights and activations rounded to bfloat16, float sums (oneDNN's matmul: AMX or AVX512-BF16 where the CPU\n"
               "      has them). int8 (--device cpu only): CTranslate2's scheme, weights quantized per output row once, activations\n"
               "      per row at each product, int32 sums (oneDNN). Either way the conv stem, the logits and attention stay float32\n"
               "      (onednn_bf16_dense.hpp, onednn_int8_dense.hpp)\n",
               argv0, argv0, cuda ? "" : "Not in this executable: whisper_cuda (built when nvcc is found) has it.",
               pw::cpu_backend().available_policies().c_str(), cuda_policies.c_str());
  std::exit(2);
}

float parse_float(const char* argv0, const std::string& flag, const char* value, float lo, float hi) {
  char* end = nullptr;
  const float x = std::strtof(value, &end);
  if (*value == '\0' || *end != '\0' || !(x >= lo && x <= hi))
    usage(argv0, flag + " " + value + " is not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

bool parse_on_off(const char* argv0, const std::string& flag, const std::string& value) {
  if (value == "on") return true;
  if (value == "off") return false;
  usage(argv0, flag + " takes on or off, not '" + value + "'");
}

// "srt", "srt,json", "all".
std::vector<std::string> parse_formats(const char* argv0, const std::string& list) {
  std::vector<std::string> formats;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string f = list.substr(at, comma - at);
    if (f == "all") {
      formats = pw::output_formats();
    } else if (std::find(pw::output_formats().begin(), pw::output_formats().end(), f) != pw::output_formats().end()) {
      if (std::find(formats.begin(), formats.end(), f) == formats.end()) formats.push_back(f);
    } else {
      usage(argv0, "--output-format '" + f + "' is not txt, srt, vtt, json or all");
    }
    at = comma + 1;
  }
  return formats;
}

int parse_int(const char* argv0, const std::string& flag, const char* value, int lo, int hi) {
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || n < lo || n > hi)
    usage(argv0, flag + " " + value + " is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(n);
}

std::string megabytes(std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu B (%.2f MiB)", bytes, static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// Peak resident memory of this process so far (Linux reports ru_maxrss in KiB), in MiB; < 0 if unknown.
double peak_rss_mib() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1.0;
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void print_cache(const char* what, const std::string& policy, const pw::CacheUse& u, const char* unit) {
  std::fprintf(stderr, "  %s cache (%s): %zu B per %s over all layers; peak %zu %ss held = %s; allocated %s; as if copied per beam %s\n",
               what, policy.c_str(), u.bytes_per_token, unit, u.tokens, unit, megabytes(u.bytes_held).c_str(),
               megabytes(u.bytes_allocated).c_str(), megabytes(u.bytes_if_copied).c_str());
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // Blocks from 512 KiB up are mapped and unmapped, never carved from the heap. glibc's default
  // raises that threshold to the largest block it has seen freed, after which a file's samples
  // and spectrogram and the encoder's buffers came from the heap between the decoder's long-lived
  // blocks and fragmented it: from a list's second file on, the peak stood 10-20 MiB above the
  // live bytes (examples/whisper/README.md). The trim threshold is fixed with it (setting one
  // turns off both dynamic ones): transcribe() trims after each window's encoder itself.
  mallopt(M_MMAP_THRESHOLD, 512 * 1024);
  mallopt(M_TRIM_THRESHOLD, 16 * 1024 * 1024);
#endif
  std::string model_path, device = "cpu", self, cross = "baseline";
  std::vector<std::string> audio;
  int threads = 0, batch = 16, beam_size = 5;
  float patience = 1.0f, length_penalty = 1.0f;
  bool timestamps = true, condition = true, fallback = true;
  unsigned long long seed = 0;
  std::vector<std::string> formats;
  std::string output_dir = ".";
  bool print_tokens = false, list_policies = false;
  std::string compute_type = "float32";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (++i >= argc) usage(argv[0], a + " needs a value");
      return argv[i];
    };
    if (a == "--model") {
      model_path = value();
    } else if (a == "--audio") {
      while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) audio.push_back(argv[++i]);
      if (audio.empty()) usage(argv[0], "--audio needs at least one file");
    } else if (a == "--device") {
      device = value();
    } else if (a == "--self") {
      self = value();
    } else if (a == "--cross") {
      cross = value();
    } else if (a == "--threads") {
      threads = parse_int(argv[0], a, value(), 1, 256);
    } else if (a == "--batch") {
      batch = parse_int(argv[0], a, value(), 1, 4096);
    } else if (a == "--beam-size") {
      beam_size = parse_int(argv[0], a, value(), 1, 64);
    } else if (a == "--patience") {
      patience = parse_float(argv[0], a, value(), 0.01f, 100.0f);
    } else if (a == "--length-penalty") {
      length_penalty = parse_float(argv[0], a, value(), 0.0f, 10.0f);
    } else if (a == "--timestamps") {
      timestamps = parse_on_off(argv[0], a, value());
    } else if (a == "--condition-on-previous-text") {
      condition = parse_on_off(argv[0], a, value());
    } else if (a == "--temperature-fallback") {
      fallback = parse_on_off(argv[0], a, value());
    } else if (a == "--seed") {
      seed = static_cast<unsigned long long>(parse_int(argv[0], a, value(), 0, 2147483647));
    } else if (a == "--output-format") {
      formats = parse_formats(argv[0], value());
    } else if (a == "--output-dir") {
      output_dir = value();
    } else if (a == "--tokens") {
      print_tokens = true;
    } else if (a == "--compute-type") {
      compute_type = value();
    } else if (a == "--list-policies") {
      list_policies = true;  // after parsing: for the --device given anywhere on the line
    } else if (a == "--help" || a == "-h") {
      usage(argv[0], "");
    } else {
      usage(argv[0], "unknown argument '" + a + "'");
    }
  }
  // Refused before anything is loaded.
  if (compute_type != "float32" && compute_type != "bfloat16" && compute_type != "int8")
    usage(argv[0], "--compute-type '" + compute_type + "' is not float32, bfloat16 or int8");
  if (compute_type != "float32" && device != "cpu")
    usage(argv[0], "--compute-type " + compute_type + " runs on --device cpu only (the cuBLAS engine multiplies float32)");
  // Asked of oneDNN here, before any audio is read or the model loads (stored_affine would
  // otherwise refuse only at the first product).
  if (compute_type == "bfloat16" && !pw::OnednnBf16Dense::supported())
    usage(argv[0], "--compute-type bfloat16: oneDNN has no bfloat16 matmul for this CPU (it needs AVX-512); use float32 or int8");
  const pw::Backend* backend = nullptr;
  if (device == "cpu") {
    backend = &pw::cpu_backend();
  } else if (device == "cuda") {
    backend = pw::cuda_backend();
    if (!backend) {
      std::fprintf(stderr,
                   "error: --device cuda: this build has no CUDA executor (%s is the CPU-only executable): run whisper_cuda, "
                   "which CMake builds beside it when it finds nvcc (rebuild with nvcc found if it is absent)\n",
                   argv[0]);
      return 2;
    }
  } else {
    usage(argv[0], "--device '" + device + "' is not cpu or cuda");
  }
  // CPU: Paged<16>, since beams share pages and the pool grows with the tokens held (at batch 16 and
  // beam 5, 26 MiB of self cache allocated against Nhd's 420 reserved, of which Nhd commits only
  // the pages it writes: examples/whisper/README.md, "Beam search"); GPU: Hnd, the decode-friendly
  // layout there.
  if (self.empty()) self = device == "cpu" ? "mha/paged16" : "mha/hnd";
  if (list_policies) {
    for (const auto& [self_name, cross_name] : backend->policy_pairs()) std::printf("%s %s\n", self_name.c_str(), cross_name.c_str());
    return 0;
  }
  if (model_path.empty() || audio.empty()) usage(argv[0], "--model and --audio are required");
  if (threads > 0) Eigen::setNbThreads(threads);

  try {
    // Refuse a policy name, or a missing GPU, before anything slow happens.
    backend->check_policies(self, cross);
    backend->check_device();

    // Every audio file is read (and resampled) before the model loads: a bad file costs no load,
    // and when none can be read nothing else happens. The files that can be read are transcribed
    // and reported; the exit status stays non-zero. Their samples are not kept: transcribe reads
    // each file again when the batch reaches it (pw::AudioSource), so that a long list of files is
    // never in memory at once (decoding a file is a small part of transcribing it).
    std::vector<std::string> paths;
    int failures = 0;
    for (const std::string& path : audio) {
      try {
        (void)pw::load_audio_16k_mono(path);
        paths.push_back(path);
      } catch (const pw::Error& e) {
        std::fprintf(stderr, "error: %s: %s\n", path.c_str(), e.what());
        ++failures;
      }
    }
    if (paths.empty()) return 1;

    const auto t0 = std::chrono::steady_clock::now();
    const pw::WhisperModel model = std::filesystem::is_directory(model_path) ? pw::WhisperModel::load_ct2(model_path)
                                                                              : pw::WhisperModel::load_ggml_file(model_path);
    const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "model: %s (%d+%d layers, d=%d, vocab %d) loaded in %.0f ms, %d thread(s)\n", model_path.c_str(),
                 model.dims().n_audio_layer, model.dims().n_text_layer, model.dims().n_audio_state, model.dims().n_vocab,
                 load_ms, Eigen::nbThreads());


    pw::TranscribeOptions opt;
    // float32: the backend's own engine (Backend::transcribe). bfloat16, int8: one engine for this
    // call, which keeps the rounded weights by address (dense.hpp) as long as the model and decoder live.
    std::unique_ptr<pw::Dense> engine;
    if (compute_type == "bfloat16") engine = std::make_unique<pw::OnednnBf16Dense>();
    if (compute_type == "int8") engine = std::make_unique<pw::OnednnInt8Dense>();
    opt.dense = engine.get();
    opt.batch = batch;
    opt.threads = threads;
    opt.beam_size = beam_size;
    opt.patience = patience;
    opt.length_penalty = length_penalty;
    opt.timestamps = timestamps;
    opt.condition_on_previous_text = condition;
    if (fallback) opt.temperatures = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};
    opt.seed = seed;
    // A progress bar for recordings over a minute, on a terminal only.
    const bool show_progress = isatty(STDERR_FILENO) != 0;
    opt.on_window = [&](std::size_t file, double done, double total) {
      if (!show_progress || total <= 60.0) return;
      const int width = 30, filled = static_cast<int>(width * std::min(1.0, done / total));
      std::fprintf(stderr, "\r  %s [%s%s] %5.1f%% (%.0f/%.0f s)%s", paths[file].c_str(), std::string(std::size_t(filled), '#').c_str(),
                   std::string(std::size_t(width - filled), '.').c_str(), 100.0 * done / total, done, total, done >= total ? "\n" : "");
    };
    const pw::AudioSource source{paths.size(), [&](std::size_t f, std::vector<float>& buffer) {
                                   buffer = pw::load_audio_16k_mono(paths[f]);  // read once already: a change since throws
                                   return std::span<const float>(buffer);
                                 }};
    const pw::Transcription result = backend->transcribe(model, self, cross, source, opt);

    for (std::size_t f = 0; f < paths.size(); ++f) {
      const pw::Transcript& t = result.files[f];
      std::printf("%s:%s\n", paths[f].c_str(), t.text.c_str());
      for (const std::string& format : formats)
        std::fprintf(stderr, "  wrote %s\n", pw::write_transcript(t, format, output_dir, paths[f]).c_str());
      if (print_tokens) {  // ids for comparing decoders token by token (bench/whisper/whisper_vs_ctranslate2.py)
        std::printf("%s:tokens:", paths[f].c_str());
        for (const int id : t.tokens) std::printf(" %d", id);
        std::printf("\n");
      }
      std::fflush(stdout);
      std::fprintf(stderr, "  %.2f s audio, %d window(s), %zu segment(s), %zu tokens\n", t.seconds,
                   t.windows, t.segments.size(), t.tokens.size());
      for (const int w : t.cut_windows)
        std::fprintf(stderr, "warning: %s: window %d/%d (from %d s) reached %d sampled tokens without end-of-text: its text is cut there\n",
                     paths[f].c_str(), w + 1, t.windows, 30 * w, model.max_new_tokens());
    }
    const pw::TranscribeReport& r = result.report;
    // run_sample.sh reads "--self S --cross C:" at the start of this line.
    std::fprintf(stderr,
                 "%s: %zu file(s), %d window(s), batch up to %d window(s) and %d sequence(s) (beam size %d); policies built in %.0f ms; "
                 "attention on %s, products on %s\n",
                 r.policies.c_str(), paths.size(), r.windows, r.max_batch, r.max_sequences, beam_size, r.prepare_ms, backend->name().c_str(),
                 r.dense.c_str());
    for (const std::string& note : r.notes) std::fprintf(stderr, "  %s\n", note.c_str());
    if (r.fallbacks > 0)
      std::fprintf(stderr, "  %d window decoding(s) repeated at a higher temperature (repetitive or unlikely text)\n", r.fallbacks);
    if (r.windows_cut > 0)
      std::fprintf(stderr, "  %d of %d window(s) cut at %d sampled tokens: their transcripts are incomplete\n", r.windows_cut,
                   r.windows, model.max_new_tokens());
    std::fprintf(stderr,
                 "  mel %.1f ms, encode %.1f ms, decode %.1f ms (opening windows %.1f ms, prefill and steps %.1f ms): %zu tokens, %.1f "
                 "tokens/s (%.1f after opening windows)\n",
                 r.mel_ms, r.encode_ms, r.decode_ms, r.cross_open_ms, r.decode_ms - r.cross_open_ms, r.text_tokens,
                 r.decode_ms > 0 ? 1000.0 * static_cast<double>(r.text_tokens) / r.decode_ms : 0.0,
                 r.decode_ms > r.cross_open_ms ? 1000.0 * static_cast<double>(r.text_tokens) / (r.decode_ms - r.cross_open_ms) : 0.0);
    // The steps alone, without prefill (which holds the baseline/K-only cross K/V projections):
    // the per-token cost that the cache options change, one token per live sequence per step.
    const double step_ms = r.decode_ms - r.cross_open_ms - r.prefill_ms;
    std::fprintf(stderr, "  prefill %.1f ms (prompt, cross K/V projections); decode steps %.1f ms: %d steps, %zu tokens, %.1f tokens/s\n",
                 r.prefill_ms, step_ms, r.decode_steps, r.step_tokens,
                 step_ms > 0 ? 1000.0 * static_cast<double>(r.step_tokens) / step_ms : 0.0);
    print_cache("self ", self, r.peak.self, "token");
    print_cache("cross", cross, r.peak.cross, "frame");
    std::fprintf(stderr, "  peak memory (max resident set): %.1f MiB\n", peak_rss_mib());
    if (const std::size_t device = backend->device_peak_bytes(); device > 0)
      std::fprintf(stderr, "  peak device memory (polyattn buffers: weights, caches, activations; not cuBLAS or the context): %s\n",
                   megabytes(device).c_str());
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
