// Bounds-checked little-endian reading of whole files held in memory. Every loader in
// this folder parses through ByteReader so that a truncated or corrupt file becomes a
// FormatError naming the field and offset, never an out-of-bounds read.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "error.hpp"

namespace polyattn::whisper {

static_assert(std::endian::native == std::endian::little,
              "the model and WAV loaders read little-endian files by memcpy: big-endian hosts "
              "are not supported");

// Reads a whole file. Throws IoError naming the path when it cannot be opened or read.
inline std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw IoError("cannot open '" + path + "'");
  const std::streamoff size = in.tellg();
  if (size < 0) throw IoError("cannot determine the size of '" + path + "'");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    throw IoError("cannot read " + std::to_string(size) + " bytes from '" + path + "'");
  return bytes;
}

class ByteReader {
 public:
  // `what` names the file or format in error messages ("model.bin", "WAV file").
  ByteReader(std::span<const std::uint8_t> data, std::string what)
      : data_(data), what_(std::move(what)) {}

  std::size_t offset() const { return offset_; }
  std::size_t size() const { return data_.size(); }
  std::size_t remaining() const { return data_.size() - offset_; }
  bool at_end() const { return offset_ == data_.size(); }
  const std::string& what() const { return what_; }

  // Reads one trivially copyable value (integers, floats) in little-endian order.
  template <class T>
  T read(std::string_view field) {
    static_assert(std::is_trivially_copyable_v<T>, "ByteReader::read needs a trivially copyable type");
    T value;
    std::memcpy(&value, take(sizeof(T), field).data(), sizeof(T));
    return value;
  }

  // The next n bytes, as a view into the buffer.
  std::span<const std::uint8_t> bytes(std::size_t n, std::string_view field) { return take(n, field); }

  std::string string(std::size_t n, std::string_view field) {
    const auto b = take(n, field);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }

  void skip(std::size_t n, std::string_view field) { take(n, field); }

  void seek(std::size_t offset) {
    if (offset > data_.size())
      fail("seek to offset " + std::to_string(offset) + " past the end (" +
           std::to_string(data_.size()) + " bytes)");
    offset_ = offset;
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw FormatError(what_ + ": " + message);
  }

 private:
  std::span<const std::uint8_t> take(std::size_t n, std::string_view field) {
    if (n > remaining())
      fail("truncated: reading " + std::string(field) + " at byte offset " + std::to_string(offset_) +
           " needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
    const auto out = data_.subspan(offset_, n);
    offset_ += n;
    return out;
  }

  std::span<const std::uint8_t> data_;
  std::string what_;
  std::size_t offset_ = 0;
};

}  // namespace polyattn::whisper
