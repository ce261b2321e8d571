// What a transcription gives for one recording: its text, tokens and segments (plain data, for
// the output writers and callers that need no model).
#pragma once

#include <string>
#include <vector>

namespace polyattn::whisper {

// A stretch of speech between two timestamps (with timestamps off: one 30 s window).
struct Segment {
  double start = 0.0, end = 0.0;  // seconds from the start of the recording
  std::string text{};             // with Whisper's leading space
  std::vector<int> tokens{};      // sampled, timestamps included, without <|endoftext|>
  // Of the window decoding that gave the segment (openai-whisper's fields):
  float avg_log_prob = 0.0f;      // sum of the token log-probs (<|endoftext|> included) / (tokens + 1)
  float temperature = 0.0f;       // of the attempt that was kept (fallback decoding)
  float compression_ratio = 0.0f; // of the window's text
  float no_speech_prob = -1.0f;   // P(<|nospeech|>) at <|startoftranscript|>; -1 where not computed
};

struct Transcript {
  std::string text;
  std::vector<int> tokens;  // sampled tokens of every window, without prompt and eot
  std::vector<Segment> segments;
  double seconds = 0.0;     // of audio
  int windows = 0;
  // Windows (0-based, in order) that reached the sample length (WhisperModel::max_new_tokens)
  // without sampling <|endoftext|>: their text stops there, cut.
  std::vector<int> cut_windows;
};

}  // namespace polyattn::whisper
