// A small strict JSON reader for the model's config.json and vocabulary.json.
// Why not a library: the example depends on Eigen only. Depth is limited so that a
// malicious file cannot overflow the stack; every error names the byte offset.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "error.hpp"

namespace polyattn::whisper {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::map<std::string, Json, std::less<>>;

  Json() = default;  // null
  explicit Json(bool b) : value_(b) {}
  explicit Json(double d) : value_(d) {}
  explicit Json(std::string s) : value_(std::move(s)) {}
  explicit Json(Array a) : value_(std::move(a)) {}
  explicit Json(Object o) : value_(std::move(o)) {}

  bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  bool is_number() const { return std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  bool is_array() const { return std::holds_alternative<Array>(value_); }
  bool is_object() const { return std::holds_alternative<Object>(value_); }

  const std::string& as_string(std::string_view what) const { return get<std::string>(what, "a string"); }
  const Array& as_array(std::string_view what) const { return get<Array>(what, "an array"); }
  const Object& as_object(std::string_view what) const { return get<Object>(what, "an object"); }
  double as_number(std::string_view what) const { return get<double>(what, "a number"); }

  // An integer-valued number in [lo, hi].
  std::int64_t as_int(std::string_view what, std::int64_t lo = INT32_MIN, std::int64_t hi = INT32_MAX) const {
    const double d = as_number(what);
    if (!(d == std::floor(d)) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
      throw FormatError(std::string(what) + ": expected an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + std::to_string(d));
    return static_cast<std::int64_t>(d);
  }

  // Member lookup; nullptr when absent (or when this is not an object).
  const Json* find(std::string_view key) const {
    const auto* o = std::get_if<Object>(&value_);
    if (!o) return nullptr;
    const auto it = o->find(key);
    return it == o->end() ? nullptr : &it->second;
  }

  static Json parse(std::string_view text, std::string what = "JSON");

 private:
  template <class T>
  const T& get(std::string_view what, const char* expected) const {
    const auto* p = std::get_if<T>(&value_);
    if (!p) throw FormatError(std::string(what) + ": expected " + expected);
    return *p;
  }

  std::variant<std::monostate, bool, double, std::string, Array, Object> value_;
};

namespace detail {

class JsonParser {
 public:
  JsonParser(std::string_view text, std::string what) : s_(text), what_(std::move(what)) {}

  Json document() {
    Json v = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected trailing characters");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 128;

  [[noreturn]] void fail(const std::string& msg) const {
    throw FormatError(what_ + ": " + msg + " at byte offset " + std::to_string(i_));
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  char peek() {
    skip_ws();
    if (i_ >= s_.size()) fail("unexpected end of input");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    const char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json(string());
    if (literal("true")) return Json(true);
    if (literal("false")) return Json(false);
    if (literal("null")) return Json();
    if (c == '-' || (c >= '0' && c <= '9')) return Json(number());
    fail(std::string("unexpected character '") + c + "'");
  }

  Json object(int depth) {
    expect('{');
    Json::Object o;
    if (peek() == '}') {
      ++i_;
      return Json(std::move(o));
    }
    for (;;) {
      if (peek() != '"') fail("expected a string key");
      std::string key = string();
      expect(':');
      o.insert_or_assign(std::move(key), value(depth + 1));
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return Json(std::move(o));
    }
  }

  Json array(int depth) {
    expect('[');
    Json::Array a;
    if (peek() == ']') {
      ++i_;
      return Json(std::move(a));
    }
    for (;;) {
      a.push_back(value(depth + 1));
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return Json(std::move(a));
    }
  }

  double number() {
    const std::size_t start = i_;
    auto digits = [&] {
      const std::size_t d0 = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == d0) fail("malformed number");
    };
    if (s_[i_] == '-') ++i_;
    digits();
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      digits();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
    }
    // std::stod is locale-independent for this grammar ("C" digits and '.').
    try {
      return std::stod(std::string(s_.substr(start, i_ - start)));
    } catch (const std::out_of_range&) {
      fail("number out of the range of double");
    }
  }

  unsigned hex4() {
    if (s_.size() - i_ < 4) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      switch (s_[i_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00) {  // high surrogate: a low one must follow
            if (!literal("\\u")) fail("unpaired surrogate in \\u escape");
            const unsigned lo = hex4();
            if (lo < 0xdc00 || lo >= 0xe000) fail("bad low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            fail("unpaired low surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }

  std::string_view s_;
  std::string what_;
  std::size_t i_ = 0;
};

}  // namespace detail

inline Json Json::parse(std::string_view text, std::string what) {
  return detail::JsonParser(text, std::move(what)).document();
}

}  // namespace polyattn::whisper
