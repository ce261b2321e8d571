// The `whisper` command line on synthetic files: what it tells the user besides the transcript.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "synthetic_files.hpp"
#include "test_util.hpp"

namespace {

struct CliRun {
  int status;
  std::string out, err;
};

// Runs the CLI (POLYATTN_WHISPER_CLI, set by CMake) with `args`, capturing stdout and stderr.
CliRun run_cli(const std::string& args) {
  const std::string out = whisper_test::temp_path("cli_stdout.txt"), err = whisper_test::temp_path("cli_stderr.txt");
  const int status = std::system((std::string(POLYATTN_WHISPER_CLI) + " " + args + " >" + out + " 2>" + err).c_str());
  auto slurp = [](const std::string& path) {
    std::ostringstream s;
    s << std::ifstream(path).rdbuf();
    std::filesystem::remove(path);
    return s.str();
  };
  return {status, slurp(out), slurp(err)};
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("the CLI says which windows were cut at the sample length (issue 11, bug 7)") {
    // fixed_output_ggml(-16) never samples <|endoftext|>; fixed_output_ggml(24) ends each window.
    const std::string never_ends = whisper_test::temp_path("cli_never_ends.ggml.bin"),
                      ends = whisper_test::temp_path("cli_ends.ggml.bin"), wav = whisper_test::temp_path("cli_silence.wav");
    whisper_test::write_file(never_ends, whisper_test::fixed_output_ggml(-16.0f));
    whisper_test::write_file(ends, whisper_test::fixed_output_ggml(24.0f));
    whisper_test::write_file(wav, whisper_test::make_wav(1, 1, 16000, 16, whisper_test::pcm16(std::vector<std::int16_t>(16000, 0))));

    // Timestamps and the temperature fallback off: plain windows decoded once.
    const std::string plain = " --timestamps off --temperature-fallback off";
    const CliRun cut = run_cli("--threads 1 --model " + never_ends + " --audio " + wav + plain);
    INFO("stderr:\n" << cut.err);
    CHECK(cut.status == 0);
    CHECK(cut.out == wav + ":" + std::string(224, 'b') + "\n");
    CHECK(cut.err.find("warning: " + wav + ": window 1/1 (from 0 s) reached 224 sampled tokens without end-of-text: "
                       "its text is cut there") != std::string::npos);
    CHECK(cut.err.find("1 of 1 window(s) cut at 224 sampled tokens") != std::string::npos);

    const CliRun whole = run_cli("--threads 1 --model " + ends + " --audio " + wav + plain);
    CHECK(whole.status == 0);
    CHECK(whole.out == wav + ":b\n");
    CHECK(whole.err.find("without end-of-text") == std::string::npos);
    for (const auto& f : {never_ends, ends, wav}) std::filesystem::remove(f);
  }

  TEST_CASE("the CLI reads every audio file before it loads the model, and reports only the files it transcribed") {
    const std::string model = whisper_test::temp_path("cli_audio_first.ggml.bin"), wav = whisper_test::temp_path("cli_audio_first.wav"),
                      missing = whisper_test::temp_path("cli_never_written.wav");
    whisper_test::write_file(model, whisper_test::fixed_output_ggml(24.0f));
    whisper_test::write_file(wav, whisper_test::make_wav(1, 1, 16000, 16, whisper_test::pcm16(std::vector<std::int16_t>(16000, 0))));

    // No readable audio: the error names the file, and the model (here not even a file) is never opened.
    const CliRun none = run_cli("--threads 1 --model " + whisper_test::temp_path("cli_no_such_model.bin") + " --audio " + missing);
    INFO("stderr:\n" << none.err);
    CHECK(none.status != 0);
    CHECK(none.out.empty());
    CHECK(none.err.find("error: " + missing + ": ") != std::string::npos);
    CHECK(none.err.find("model") == std::string::npos);

    // One readable file among two: it is transcribed and reported, the other is named, the status says so.
    const CliRun some = run_cli("--threads 1 --timestamps off --model " + model + " --audio " + missing + " " + wav);
    INFO("stderr:\n" << some.err);
    CHECK(some.status != 0);
    CHECK(some.out == wav + ":b\n");
    CHECK(some.err.find("error: " + missing + ": ") < some.err.find("model: "));
    CHECK(some.err.find("1 file(s)") != std::string::npos);
    for (const auto& f : {model, wav}) std::filesystem::remove(f);
  }

  TEST_CASE("the CLI writes the transcripts it is asked for, named after the audio files, and refuses unknown formats") {
    const std::string model = whisper_test::temp_path("cli_outputs.ggml.bin"), wav = whisper_test::temp_path("cli_outputs_clip.wav"),
                      dir = whisper_test::temp_path("cli_outputs");
    whisper_test::write_file(model, whisper_test::fixed_output_ggml(24.0f));
    whisper_test::write_file(wav, whisper_test::make_wav(1, 1, 16000, 16, whisper_test::pcm16(std::vector<std::int16_t>(16000, 0))));
    const CliRun run = run_cli("--threads 1 --timestamps off --model " + model + " --audio " + wav + " --output-format srt,json --output-dir " + dir);
    INFO("stderr:\n" << run.err);
    CHECK(run.status == 0);
    CHECK(run.out == wav + ":b\n");
    const std::string stem = dir + "/" + std::filesystem::path(wav).stem().string();  // clip.wav gives clip.srt
    CHECK(std::filesystem::exists(stem + ".srt"));
    CHECK(std::filesystem::exists(stem + ".json"));
    CHECK(!std::filesystem::exists(stem + ".vtt"));
    std::ostringstream srt;
    srt << std::ifstream(stem + ".srt").rdbuf();
    CHECK(srt.str() == "1\n00:00:00,000 --> 00:00:01,000\nb\n\n");  // the window: the 1 s of audio
    const CliRun bad = run_cli("--model " + model + " --audio " + wav + " --output-format doc");
    CHECK(bad.status != 0);
    CHECK(bad.err.find("--output-format 'doc' is not txt, srt, vtt, json or all") != std::string::npos);
    const CliRun bad_switch = run_cli("--model " + model + " --audio " + wav + " --timestamps maybe");
    CHECK(bad_switch.err.find("--timestamps takes on or off, not 'maybe'") != std::string::npos);
    std::filesystem::remove_all(dir);
    for (const auto& f : {model, wav}) std::filesystem::remove(f);
  }

  TEST_CASE("the CLI refuses a compute type it does not have before it loads the model") {
    // The model is not even a file: the refusal comes first, and names what is available.
    const std::string model = whisper_test::temp_path("cli_no_such_model_for_compute_type.bin"),
                      wav = whisper_test::temp_path("cli_compute_type.wav");
    whisper_test::write_file(wav, whisper_test::make_wav(1, 1, 16000, 16, whisper_test::pcm16(std::vector<std::int16_t>(1600, 0))));
    const CliRun foo = run_cli("--model " + model + " --audio " + wav + " --compute-type foo");
    INFO("stderr:\n" << foo.err);
    CHECK(foo.status != 0);
    CHECK(foo.err.find("error: --compute-type 'foo' is not float32, bfloat16 or int8") != std::string::npos);
    CHECK(foo.err.find("model:") == std::string::npos);
    for (const std::string type : {"int8", "bfloat16"}) {
      const CliRun cuda = run_cli("--model " + model + " --audio " + wav + " --device cuda --compute-type " + type);
      CHECK(cuda.status != 0);
      CHECK(cuda.err.find("error: --compute-type " + type + " runs on --device cpu only") != std::string::npos);
    }
    std::filesystem::remove(wav);
  }

  TEST_CASE("the CLI's int8 and bfloat16 compute types run the products on their engines and say so") {
    const std::string model = whisper_test::temp_path("cli_int8.ggml.bin"), wav = whisper_test::temp_path("cli_int8.wav");
    whisper_test::write_file(model, whisper_test::fixed_output_ggml(24.0f));
    whisper_test::write_file(wav, whisper_test::make_wav(1, 1, 16000, 16, whisper_test::pcm16(std::vector<std::int16_t>(16000, 0))));
    const CliRun run = run_cli("--threads 1 --timestamps off --model " + model + " --audio " + wav + " --compute-type int8");
    INFO("stderr:\n" << run.err);
    CHECK(run.status == 0);
    CHECK(run.out == wav + ":b\n");
    CHECK(run.err.find("products on onednn int8 (CPU)") != std::string::npos);
    const CliRun float32 = run_cli("--threads 1 --timestamps off --model " + model + " --audio " + wav + " --compute-type float32");
    CHECK(float32.status == 0);
    CHECK(float32.err.find("products on onednn (CPU)") != std::string::npos);
    // bfloat16 runs where oneDNN has a bfloat16 matmul for the CPU (AVX-512 and later), and
    // otherwise is refused before the model loads, saying so (main.cpp asks oneDNN first).
    const CliRun bf16 = run_cli("--threads 1 --timestamps off --model " + model + " --audio " + wav + " --compute-type bfloat16");
    INFO("bfloat16 stderr:\n" << bf16.err);
    if (bf16.status == 0) {
      CHECK(bf16.out == wav + ":b\n");
      CHECK(bf16.err.find("products on onednn bfloat16 (CPU)") != std::string::npos);
    } else {
      CHECK(bf16.err.find("--compute-type bfloat16: oneDNN has no bfloat16 matmul for this CPU") != std::string::npos);
      CHECK(bf16.err.find("model:") == std::string::npos);  // refused before loading anything
      CHECK(bf16.out.empty());
    }
    for (const auto& f : {model, wav}) std::filesystem::remove(f);
  }
}
