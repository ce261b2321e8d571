// Whisper-MLA without fine-tuning: word error rate against latent rank on real tiny.en.
//   whisper_mla_wer <ct2 tiny.en dir> [data dir]
// Clips: jfk.wav from the data dir (default POLYATTN_SHARED_DATA_DIR; skipped with a message
// when absent) and sentences synthesized by espeak-ng into a temporary directory (skipped with a
// message when espeak-ng is missing). Each rank decodes every clip as one batch; its transcripts
// are scored against the MHA transcript of the same clip (the honest comparison: same model and
// audio, only the self-attention cache changes) and against the text that was spoken.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>  // mkdtemp

#include <whisper/model.hpp>
#include <whisper/policies.hpp>
#include <whisper/transcribe.hpp>  // ranks of its own, instantiated here
#include <whisper/audio.hpp>
#include <whisper/wer.hpp>

namespace pw = polyattn::whisper;

namespace {

// The ranks swept; a local list: DecoderCombinations is what the CLI and tests instantiate, and
// eight more decoders there would cost every build of them. 384 = d_model of tiny.en: full rank.
template <int R>
using MlaPolicies = pw::DecoderPolicies<pw::Self<pw::self_kind::Mla<R>>, pw::Cross<polyattn::cross::Baseline>>;
using MlaRanks = polyattn::TypeList<MlaPolicies<32>, MlaPolicies<64>, MlaPolicies<96>, MlaPolicies<128>, MlaPolicies<192>,
                                    MlaPolicies<256>, MlaPolicies<320>, MlaPolicies<384>>;

struct Clip {
  std::string name;
  std::string spoken;  // what the speaker said: the reference for "vs text"
  std::vector<float> samples;
};

// Sentences for espeak-ng: short commands, numbers-free prose, and one long passage whose
// ~100 tokens give an approximate self cache more steps to drift over. No apostrophes: they
// would end the shell quoting.
const std::vector<std::string> kSentences = {
    "Memory bandwidth limits every decoding step.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "The weather today is sunny with a light breeze from the west.",
    "Every new token reads the whole cache of keys and values.",
    "The old lighthouse keeper climbed the stairs each evening to light the lamp. Ships passing in the night "
    "relied on its steady beam to find the harbour, and for many years not a single vessel was lost on the rocks "
    "below the cliff.",
};

// The words of the JFK recording (its well-known text), so jfk.wav is scored against speech
// as well as against the MHA transcript.
constexpr const char* kJfkSpoken =
    "And so, my fellow Americans, ask not what your country can do for you; ask what you can do for your country.";

std::vector<Clip> load_clips(const std::string& data_dir) {
  std::vector<Clip> clips;
  const std::filesystem::path jfk = std::filesystem::path(data_dir) / "jfk.wav";
  if (std::filesystem::exists(jfk))
    clips.push_back({"jfk", kJfkSpoken, pw::load_audio_16k_mono(jfk.string())});
  else
    std::fprintf(stderr, "skipping jfk.wav: %s is not present\n", jfk.c_str());

  if (std::system("command -v espeak-ng >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "skipping the synthesized sentences: espeak-ng is not installed (apt-get install espeak-ng)\n");
    return clips;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "whisper_mla_wer_XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "skipping the synthesized sentences: cannot create a directory from %s\n", tmpl.c_str());
    return clips;
  }
  const std::filesystem::path dir = tmpl;
  for (std::size_t i = 0; i < kSentences.size(); ++i) {
    const std::string path = (dir / ("espeak_" + std::to_string(i) + ".wav")).string();
    if (std::system(("espeak-ng -w '" + path + "' '" + kSentences[i] + "'").c_str()) != 0) {
      std::fprintf(stderr, "skipping sentence %zu: espeak-ng failed\n", i);
      continue;
    }
    clips.push_back({"espeak" + std::to_string(i), kSentences[i], pw::load_audio_16k_mono(path)});
  }
  std::filesystem::remove_all(dir);
  return clips;
}

struct RankResult {
  std::string name;
  std::size_t self_bytes_per_token = 0;
  std::vector<std::string> texts;
  std::vector<pw::WordErrors> vs_mha, vs_text;
  pw::WordErrors total_mha, total_text;
};

RankResult score(const std::string& name, const pw::Transcription& t, const std::vector<Clip>& clips,
                 const pw::Transcription* mha) {
  RankResult r;
  r.name = name;
  r.self_bytes_per_token = t.report.peak.self.bytes_per_token;
  for (std::size_t i = 0; i < clips.size(); ++i) {
    r.texts.push_back(t.files[i].text);
    // The MHA row is scored against itself: 0 by construction, printed for the table's shape.
    r.vs_mha.push_back(pw::word_errors(mha ? mha->files[i].text : t.files[i].text, t.files[i].text));
    r.vs_text.push_back(pw::word_errors(clips[i].spoken, t.files[i].text));
    r.total_mha.errors += r.vs_mha.back().errors;
    r.total_mha.reference_words += r.vs_mha.back().reference_words;
    r.total_text.errors += r.vs_text.back().errors;
    r.total_text.reference_words += r.vs_text.back().reference_words;
  }
  return r;
}

std::string wer(const pw::WordErrors& e) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f%% (%zu/%zu)", 100.0 * e.rate(), e.errors, e.reference_words);
  return buf;
}

// Markdown cells must not contain '|'; Whisper text could.
std::string cell(std::string s) {
  for (char& c : s)
    if (c == '|') c = '/';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s <ct2 tiny.en model dir> [data dir holding jfk.wav; default %s]\n", argv[0],
                 POLYATTN_SHARED_DATA_DIR);
    return 2;
  }
  try {
    const pw::WhisperModel model = pw::WhisperModel::load_ct2(argv[1]);
    const std::vector<Clip> clips = load_clips(argc > 2 ? argv[2] : POLYATTN_SHARED_DATA_DIR);
    if (clips.empty()) {
      std::fprintf(stderr, "no clips: neither jfk.wav nor espeak-ng is available\n");
      return 1;
    }
    std::vector<std::vector<float>> audio;
    for (const Clip& c : clips) audio.push_back(c.samples);
    const std::span<const std::vector<float>> files(audio);
    // All clips in one batch; tokens do not depend on the batch (model.hpp), only the run time does.
    pw::TranscribeOptions opt;
    opt.batch = static_cast<int>(clips.size());
    opt.threads = 2;

    const pw::Transcription mha = model.transcribe<pw::DefaultPolicies>(files, opt);
    std::vector<RankResult> rows{score(pw::DefaultPolicies::self_policy::name(), mha, clips, nullptr)};
    [&]<class... Ps>(polyattn::TypeList<Ps...>) {
      (..., [&] {
        std::fprintf(stderr, "decoding with %s\n", Ps::name().c_str());
        rows.push_back(score(Ps::self_policy::name(), model.transcribe<Ps>(files, opt), clips, &mha));
      }());
    }(MlaRanks{});

    const double mha_bytes = static_cast<double>(rows.front().self_bytes_per_token);
    std::printf("Whisper-MLA (no fine-tuning) on tiny.en, cross cache baseline; %zu clip(s), %zu MHA words, %zu spoken words\n\n",
                clips.size(), rows.front().total_mha.reference_words, rows.front().total_text.reference_words);
    std::printf("| self | self cache B/token | of MHA cache | WER vs MHA transcript | WER vs spoken text |\n|---|---|---|---|---|\n");
    for (const RankResult& r : rows)
      std::printf("| %s | %zu | %.1f%% | %s | %s |\n", r.name.c_str(), r.self_bytes_per_token,
                  mha_bytes > 0 ? 100.0 * static_cast<double>(r.self_bytes_per_token) / mha_bytes : 0.0, wer(r.total_mha).c_str(),
                  wer(r.total_text).c_str());

    std::printf("\n| self | clip | transcript | WER vs MHA | WER vs spoken |\n|---|---|---|---|---|\n");
    for (const RankResult& r : rows)
      for (std::size_t i = 0; i < clips.size(); ++i)
        std::printf("| %s | %s | %s | %s | %s |\n", r.name.c_str(), clips[i].name.c_str(), cell(r.texts[i]).c_str(),
                    wer(r.vs_mha[i]).c_str(), wer(r.vs_text[i]).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
