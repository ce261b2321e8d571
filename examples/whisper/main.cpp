// whisper: transcribe WAV files with the Whisper tiny.en model in CTranslate2 format
// (examples/whisper/fetch_model.sh) or a whisper.cpp ggml file.
//   whisper --model DIR|FILE.bin --audio FILE [FILE...] [--threads N]
#include <Eigen/Core>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <whisper/model.hpp>
#include <whisper/wav.hpp>

namespace {

[[noreturn]] void usage(const char* argv0, const std::string& error) {
  if (!error.empty()) std::cerr << "error: " << error << "\n";
  std::cerr << "usage: " << argv0 << " --model DIR|FILE.bin --audio FILE [FILE...] [--threads N]\n"
            << "  DIR: a CTranslate2 Whisper model directory (model.bin, config.json, vocabulary.txt)\n"
            << "  FILE.bin: a whisper.cpp ggml model (f32/f16)\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  namespace pw = polyattn::whisper;
  std::string model_path;
  std::vector<std::string> audio;
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model") {
      if (++i >= argc) usage(argv[0], "--model needs a value");
      model_path = argv[i];
    } else if (a == "--audio") {
      while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) audio.push_back(argv[++i]);
      if (audio.empty()) usage(argv[0], "--audio needs at least one file");
    } else if (a == "--threads") {
      if (++i >= argc) usage(argv[0], "--threads needs a value");
      char* end = nullptr;
      const long n = std::strtol(argv[i], &end, 10);
      if (*end != '\0' || n < 1 || n > 256) usage(argv[0], std::string("--threads ") + argv[i] + " is not in [1, 256]");
      threads = static_cast<int>(n);
    } else if (a == "--help" || a == "-h") {
      usage(argv[0], "");
    } else {
      usage(argv[0], "unknown argument '" + a + "'");
    }
  }
  if (model_path.empty() || audio.empty()) usage(argv[0], "--model and --audio are required");
  if (threads > 0) Eigen::setNbThreads(threads);

  try {
    const auto t0 = std::chrono::steady_clock::now();
    const pw::WhisperModel model = std::filesystem::is_directory(model_path) ? pw::WhisperModel::load_ct2(model_path)
                                                                              : pw::WhisperModel::load_ggml_file(model_path);
    const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "model: %s (%d+%d layers, d=%d, vocab %d) loaded in %.0f ms, %d thread(s)\n", model_path.c_str(),
                 model.dims().n_audio_layer, model.dims().n_text_layer, model.dims().n_audio_state, model.dims().n_vocab,
                 load_ms, Eigen::nbThreads());
    int failures = 0;
    for (const std::string& path : audio) {
      try {
        const std::vector<float> samples = pw::load_wav_16k_mono(path);
        const pw::Transcript t = model.transcribe(samples);
        std::printf("%s:%s\n", path.c_str(), t.text.c_str());
        std::fflush(stdout);
        std::fprintf(stderr, "  %.2f s audio, %d window(s), %zu tokens: mel %.1f ms, encode %.1f ms, decode %.1f ms\n",
                     static_cast<double>(samples.size()) / 16000.0, t.windows, t.tokens.size(), t.mel_ms, t.encode_ms,
                     t.decode_ms);
      } catch (const pw::Error& e) {
        std::fprintf(stderr, "error: %s: %s\n", path.c_str(), e.what());
        ++failures;
      }
    }
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
