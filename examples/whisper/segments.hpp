// Long-form transcription's bookkeeping, as openai-whisper's transcribe() does it (and
// faster-whisper after it): a window's sampled tokens, timestamps included, become segments,
// and the window says how far the next one starts; compression_ratio is the fallback test for
// repetitive text.
//
// Times: a mel frame is 10 ms (hop 160 at 16 kHz); a timestamp token <|t|> is t * 20 ms after its
// window's start (the encoder halves the frames), so a seek in frames moves by 2 per timestamp step.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <zlib.h>

#include "error.hpp"

namespace polyattn::whisper {

inline constexpr double kSecondsPerFrame = 0.01;
inline constexpr double kSecondsPerTimestamp = 0.02;
inline constexpr int kFramesPerTimestamp = 2;

// One segment of a window: tokens [first, last) of its sampled tokens, between timestamps.
struct SegmentSpan {
  std::size_t first = 0, last = 0;
  double start = 0.0, end = 0.0;  // seconds from the window's start
};

struct WindowSplit {
  std::vector<SegmentSpan> segments;
  int seek_frames = 0;  // where the next window starts, from this window's start
};

// openai-whisper transcribe(): segments end where two timestamps follow each other (an end and
// the next start). When the window ends on a lone timestamp, every segment is complete and the
// next window starts after this one (segment_frames); otherwise the last segment is cut by the
// window's end and the next window starts at the last complete segment's end. Without a pair,
// the whole window is one segment, ending at its last timestamp (if any besides <|0.00|>) or at
// its end. segment_frames: frames of audio in the window (3000, less in the last window).
inline WindowSplit split_window(std::span<const int> tokens, int timestamp_begin, int segment_frames) {
  const std::size_t n = tokens.size();
  auto stamp = [&](std::size_t i) { return tokens[i] >= timestamp_begin; };
  auto seconds = [&](std::size_t i) { return double(tokens[i] - timestamp_begin) * kSecondsPerTimestamp; };
  WindowSplit out;
  std::vector<std::size_t> slices;  // where a segment ends: after each pair's first timestamp
  for (std::size_t i = 0; i + 1 < n; ++i)
    if (stamp(i) && stamp(i + 1)) slices.push_back(i + 1);
  const bool single_timestamp_ending = n >= 2 && !stamp(n - 2) && stamp(n - 1);
  if (!slices.empty()) {
    if (single_timestamp_ending) slices.push_back(n);
    std::size_t last = 0;
    for (std::size_t cut : slices) {
      out.segments.push_back({last, cut, seconds(last), seconds(cut - 1)});
      last = cut;
    }
    out.seek_frames = single_timestamp_ending ? segment_frames : (tokens[last - 1] - timestamp_begin) * kFramesPerTimestamp;
    return out;
  }
  double end = double(segment_frames) * kSecondsPerFrame;
  for (std::size_t i = n; i-- > 0;)
    if (stamp(i)) {
      if (tokens[i] != timestamp_begin) end = seconds(i);
      break;
    }
  out.segments.push_back({0, n, 0.0, end});
  out.seek_frames = segment_frames;
  return out;
}

// len(text) / len(zlib.compress(text)) at zlib's default level, as openai-whisper and
// faster-whisper compute it: above 2.4 the text repeats itself and the window is decoded again.
inline double compression_ratio(const std::string& text) {
  if (text.empty()) return 0.0;
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::vector<Bytef> out(size);
  if (compress2(out.data(), &size, reinterpret_cast<const Bytef*>(text.data()), static_cast<uLong>(text.size()), Z_DEFAULT_COMPRESSION) != Z_OK)
    throw Error("compression_ratio: zlib's compress2 failed");
  return double(text.size()) / double(size);
}

}  // namespace polyattn::whisper
