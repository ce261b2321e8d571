// Transcripts as files, in openai-whisper's formats and names (its utils.py writers): plain text,
// SRT and WebVTT subtitles, and JSON with the segments (nlohmann-json). `jfk.wav` gives
// `jfk.txt`, `jfk.srt`, `jfk.vtt`, `jfk.json` in the output directory.
#pragma once

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.hpp"
#include "transcript.hpp"

namespace polyattn::whisper {

inline const std::vector<std::string>& output_formats() {
  static const std::vector<std::string> formats = {"txt", "srt", "vtt", "json"};
  return formats;
}

// "HH:MM:SS<sep>mmm", rounded to the millisecond (SRT: ',', WebVTT: '.').
inline std::string subtitle_time(double seconds, char separator) {
  const long long ms = std::llround(std::max(seconds, 0.0) * 1000.0);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, separator, ms % 1000);
  return buf;
}

// A cue's text: without the leading and trailing blanks, and without "-->", which would end the
// cue's timing line (openai-whisper writes "->" instead).
inline std::string cue_text(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n");
  if (first == std::string_view::npos) return {};
  std::string t(text.substr(first, text.find_last_not_of(" \t\n") - first + 1));
  for (std::size_t at; (at = t.find("-->")) != std::string::npos;) t.replace(at, 3, "->");
  for (char& c : t)
    if (c == '\n') c = ' ';  // a blank line would end the cue
  return t;
}

inline std::string format_txt(const Transcript& t) {
  std::string out;
  for (const Segment& s : t.segments)
    if (std::string line = cue_text(s.text); !line.empty()) out += line + "\n";
  return out;
}

inline std::string format_srt(const Transcript& t) {
  std::string out;
  int index = 0;
  for (const Segment& s : t.segments) {
    const std::string text = cue_text(s.text);
    if (text.empty()) continue;
    out += std::to_string(++index) + "\n" + subtitle_time(s.start, ',') + " --> " + subtitle_time(s.end, ',') + "\n" + text + "\n\n";
  }
  return out;
}

inline std::string format_vtt(const Transcript& t) {
  std::string out = "WEBVTT\n\n";
  for (const Segment& s : t.segments) {
    const std::string text = cue_text(s.text);
    if (text.empty()) continue;
    out += subtitle_time(s.start, '.') + " --> " + subtitle_time(s.end, '.') + "\n" + text + "\n\n";
  }
  return out;
}

// openai-whisper's result dictionary: text, segments (id, start, end, text, tokens, temperature,
// avg_logprob, compression_ratio, no_speech_prob), language.
inline std::string format_json(const Transcript& t) {
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  int id = 0;
  for (const Segment& s : t.segments) {
    nlohmann::ordered_json j;
    j["id"] = id++;
    j["start"] = std::round(s.start * 1000.0) / 1000.0;
    j["end"] = std::round(s.end * 1000.0) / 1000.0;
    j["text"] = s.text;
    j["tokens"] = s.tokens;
    j["temperature"] = s.temperature;
    j["avg_logprob"] = s.avg_log_prob;
    j["compression_ratio"] = s.compression_ratio;
    if (s.no_speech_prob >= 0.0f) j["no_speech_prob"] = s.no_speech_prob;
    else j["no_speech_prob"] = nullptr;
    segments.push_back(std::move(j));
  }
  const nlohmann::ordered_json doc = {{"text", t.text}, {"segments", std::move(segments)}, {"language", "en"}};
  // Invalid UTF-8 cannot occur (the tokenizer sanitises), but would be replaced rather than thrown.
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

inline std::string format_transcript(const Transcript& t, const std::string& format) {
  if (format == "txt") return format_txt(t);
  if (format == "srt") return format_srt(t);
  if (format == "vtt") return format_vtt(t);
  if (format == "json") return format_json(t);
  throw Error("output format '" + format + "' is not txt, srt, vtt or json");
}

// Writes `t` as `<dir>/<audio file name without extension>.<format>`; returns that path.
inline std::filesystem::path write_transcript(const Transcript& t, const std::string& format, const std::filesystem::path& dir,
                                              const std::filesystem::path& audio) {
  const std::string text = format_transcript(t, format);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path path = dir / (audio.stem().string() + "." + format);
  std::ofstream f(path, std::ios::binary);
  if (!(f << text) || !f.flush()) throw Error("cannot write " + path.string());
  return path;
}

}  // namespace polyattn::whisper
