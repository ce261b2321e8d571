// CTranslate2 model directory reader: model.bin + config.json + vocabulary.
//
// model.bin layout (binary versions 4..6, all little-endian):
//   u32 binary_version, string spec_name, u32 spec_revision, u32 n_variables,
//   n_variables x { string name, u8 rank, u32 dims[rank], u8 dtype, u32 n_bytes, data },
//   u32 n_aliases, n_aliases x { string alias, string variable_name }
// where string = u16 length (including a trailing NUL) + bytes.
// dtype: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16.
// Float tensors keep the precision they are stored in (stored_floats.hpp) until the weights take
// them (take()). Integer variables are kept only as small metadata (num_heads, activation, ...);
// a quantized model (int8 weights with *_scale variables) is refused with UnsupportedError.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>  // Eigen::half, Eigen::bfloat16
#include <nlohmann/json.hpp>

#include "byte_reader.hpp"
#include "checked_size.hpp"
#include "error.hpp"
#include "mapped_file.hpp"
#include "stored_floats.hpp"

namespace polyattn::whisper {

enum class Ct2DType : std::uint8_t { float32 = 0, int8 = 1, int16 = 2, int32 = 3, float16 = 4, bfloat16 = 5 };

inline const char* to_string(Ct2DType t) {
  switch (t) {
    case Ct2DType::float32: return "float32";
    case Ct2DType::int8: return "int8";
    case Ct2DType::int16: return "int16";
    case Ct2DType::int32: return "int32";
    case Ct2DType::float16: return "float16";
    case Ct2DType::bfloat16: return "bfloat16";
  }
  return "?";
}

struct Ct2Variable {
  std::string name;
  std::vector<std::int64_t> shape;  // row-major, outermost first; empty for a scalar
  Ct2DType dtype = Ct2DType::float32;  // dtype in the file
  StoredFloats elements;               // float dtypes, as stored; empty once taken (Ct2ModelBin::take)
  std::vector<std::int64_t> ints;      // integer dtypes

  /// The float elements converted to float32 (exact).
  std::vector<float> values() const { return elements.to_float(); }

  bool is_float() const { return dtype == Ct2DType::float32 || dtype == Ct2DType::float16 || dtype == Ct2DType::bfloat16; }
  // The product of the shape. parse() checked it against the variable's bytes, so it fits; a
  // shape set by hand that does not is a FormatError, never a wrapped count.
  std::int64_t numel() const {
    const std::optional<std::uint64_t> n = shape_volume(shape);
    if (!n || *n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw FormatError("model.bin: variable '" + name + "' has shape " + shape_string(shape) + ", whose element count does not fit in 64 bits");
    return static_cast<std::int64_t>(*n);
  }
};

class Ct2ModelBin {
 public:
  std::uint32_t binary_version = 0;
  std::string spec_name;
  std::uint32_t spec_revision = 0;

  // Variable by name or alias. Throws ModelError naming the tensor when absent.
  const Ct2Variable& get(const std::string& name) const {
    auto it = variables_.find(name);
    if (it == variables_.end()) {
      const auto a = aliases_.find(name);
      if (a != aliases_.end()) it = variables_.find(a->second);
    }
    if (it == variables_.end()) throw ModelError("model.bin: unknown tensor '" + name + "'");
    return it->second;
  }
  bool contains(const std::string& name) const { return variables_.count(name) || aliases_.count(name); }

  // A float tensor whose shape must equal `expected`. Throws ModelError on a shape mismatch
  // and UnsupportedError when the variable is not a float tensor.
  const Ct2Variable& tensor(const std::string& name, const std::vector<std::int64_t>& expected) const {
    const Ct2Variable& v = get(name);
    if (!v.is_float())
      throw UnsupportedError("model.bin: tensor '" + name + "' has dtype " + to_string(v.dtype) +
                             "; only float32/float16/bfloat16 weights are supported");
    if (v.shape != expected)
      throw ModelError("model.bin: tensor '" + name + "' has shape " + shape_string(v.shape) + ", expected " +
                       shape_string(expected));
    if (v.elements.size() != static_cast<std::size_t>(v.numel()))
      throw ModelError("model.bin: tensor '" + name + "' was already taken");
    return v;
  }

  // tensor(name, expected)'s elements, moved out: the variable keeps its name and shape but no
  // longer its data, so that the weights never hold a second copy of the file's tensors.
  StoredFloats take(const std::string& name, const std::vector<std::int64_t>& expected) {
    return std::exchange(const_cast<Ct2Variable&>(tensor(name, expected)).elements, StoredFloats{});
  }

  // An integer scalar (e.g. "encoder/num_heads").
  std::int64_t scalar_int(const std::string& name) const {
    const Ct2Variable& v = get(name);
    if (v.ints.size() != 1)
      throw ModelError("model.bin: '" + name + "' is not an integer scalar (dtype " + to_string(v.dtype) + ", shape " +
                       shape_string(v.shape) + ")");
    return v.ints[0];
  }

  const std::map<std::string, Ct2Variable>& variables() const { return variables_; }
  const std::map<std::string, std::string>& aliases() const { return aliases_; }

  // Parses model.bin from bytes in memory; each float tensor is copied out of them.
  static Ct2ModelBin parse(std::span<const std::uint8_t> bytes, const std::string& what = "model.bin");
  // The same from a mapped file; each float tensor is a view of its bytes there (no copy until
  // take(), stored_floats.hpp), and the model keeps the file mapped while it holds one.
  static Ct2ModelBin parse(const std::shared_ptr<const MappedFile>& file);

 private:
  // `file`: the mapping `bytes` lies in, or empty to copy the tensors.
  static Ct2ModelBin parse(std::span<const std::uint8_t> bytes, const std::string& what, const std::shared_ptr<const MappedFile>& file);

  std::map<std::string, Ct2Variable> variables_;
  std::map<std::string, std::string> aliases_;
};

namespace detail {

inline std::string read_ct2_string(ByteReader& r, std::string_view field) {
  const std::uint16_t n = r.read<std::uint16_t>(field);
  if (n == 0) r.fail(std::string(field) + " has length 0 (the length counts a trailing NUL)");
  std::string s = r.string(n, field);
  if (s.back() != '\0') r.fail(std::string(field) + " is not NUL-terminated");
  s.pop_back();
  if (s.find('\0') != std::string::npos) r.fail(std::string(field) + " contains a NUL byte");
  return s;
}

}  // namespace detail

inline Ct2ModelBin Ct2ModelBin::parse(std::span<const std::uint8_t> bytes, const std::string& what) {
  return parse(bytes, what, std::shared_ptr<const MappedFile>());
}

inline Ct2ModelBin Ct2ModelBin::parse(const std::shared_ptr<const MappedFile>& file) {
  return parse(file->bytes(), file->path(), file);
}

inline Ct2ModelBin Ct2ModelBin::parse(std::span<const std::uint8_t> bytes, const std::string& what,
                                      const std::shared_ptr<const MappedFile>& file) {
  ByteReader r(bytes, what);
  Ct2ModelBin m;
  m.binary_version = r.read<std::uint32_t>("binary version");
  if (m.binary_version < 4 || m.binary_version > 6)
    throw UnsupportedError(what + ": binary version " + std::to_string(m.binary_version) +
                           " is not supported (expected 4..6)");
  m.spec_name = detail::read_ct2_string(r, "spec name");
  m.spec_revision = r.read<std::uint32_t>("spec revision");
  const std::uint32_t n_vars = r.read<std::uint32_t>("variable count");
  for (std::uint32_t i = 0; i < n_vars; ++i) {
    Ct2Variable v;
    v.name = detail::read_ct2_string(r, "variable name");
    const std::uint8_t rank = r.read<std::uint8_t>("rank");
    if (rank > 8) r.fail("variable '" + v.name + "' has rank " + std::to_string(rank) + " (at most 8 supported)");
    for (int d = 0; d < rank; ++d) v.shape.push_back(r.read<std::uint32_t>("dimension"));
    const std::optional<std::uint64_t> numel = shape_volume(v.shape);
    if (!numel) r.fail("variable '" + v.name + "' has shape " + shape_string(v.shape) + ", whose element count does not fit in 64 bits");
    const std::uint8_t dtype = r.read<std::uint8_t>("dtype");
    if (dtype > 5)
      throw UnsupportedError(what + ": variable '" + v.name + "' has dtype id " + std::to_string(dtype) +
                             " (known: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16)");
    v.dtype = static_cast<Ct2DType>(dtype);
    const std::uint32_t n_bytes = r.read<std::uint32_t>("byte count");
    static constexpr std::uint64_t kItemSize[] = {4, 1, 2, 4, 2, 2};
    const std::optional<std::uint64_t> expected_bytes = checked_mul(*numel, kItemSize[dtype]);
    if (!expected_bytes || n_bytes != *expected_bytes)
      r.fail("variable '" + v.name + "' has " + std::to_string(n_bytes) + " bytes, expected " +
             (expected_bytes ? std::to_string(*expected_bytes) : std::string("more than 2^64")) + " for shape " +
             shape_string(v.shape) + " of " + to_string(v.dtype));
    const auto data = r.bytes(n_bytes, "variable data");
    const std::size_t n = static_cast<std::size_t>(*numel);  // at most n_bytes
    const std::uint8_t* p = data.data();
    auto floats = [&](StoredFloats::Precision precision) { return StoredFloats::view_or_copy(file, p, n, precision); };
    switch (v.dtype) {
      case Ct2DType::float32: v.elements = floats(StoredFloats::Precision::float32); break;
      case Ct2DType::float16: v.elements = floats(StoredFloats::Precision::float16); break;
      case Ct2DType::bfloat16: v.elements = floats(StoredFloats::Precision::bfloat16); break;
      case Ct2DType::int8:
        for (std::size_t k = 0; k < n; ++k) v.ints.push_back(static_cast<std::int8_t>(p[k]));
        break;
      case Ct2DType::int16:
        for (std::size_t k = 0; k < n; ++k) {
          std::int16_t x;
          std::memcpy(&x, p + 2 * k, 2);
          v.ints.push_back(x);
        }
        break;
      case Ct2DType::int32:
        for (std::size_t k = 0; k < n; ++k) {
          std::int32_t x;
          std::memcpy(&x, p + 4 * k, 4);
          v.ints.push_back(x);
        }
        break;
    }
    const std::string name = v.name;
    if (!m.variables_.emplace(name, std::move(v)).second) r.fail("duplicate variable '" + name + "'");
  }
  const std::uint32_t n_aliases = r.read<std::uint32_t>("alias count");
  for (std::uint32_t i = 0; i < n_aliases; ++i) {
    std::string alias = detail::read_ct2_string(r, "alias name");
    std::string target = detail::read_ct2_string(r, "alias target");
    if (!m.variables_.count(target)) r.fail("alias '" + alias + "' points to unknown variable '" + target + "'");
    if (m.variables_.count(alias) || !m.aliases_.emplace(alias, target).second)
      r.fail("alias '" + alias + "' is defined twice");
  }
  if (!r.at_end()) r.fail(std::to_string(r.remaining()) + " unexpected trailing bytes");

  // Quantized weights come with per-row scales; this example runs float weights only.
  for (const auto& [name, var] : m.variables_) {
    if (!name.ends_with("_scale")) continue;
    const auto w = m.variables_.find(name.substr(0, name.size() - 6));
    if (w != m.variables_.end() && !w->second.is_float())
      throw UnsupportedError(what + ": the model is quantized ('" + w->first + "' is " + to_string(w->second.dtype) +
                             " with '" + name + "'); convert it with --quantization float16 or float32");
  }
  return m;
}

// ---- JSON (config.json, vocabulary.json) through nlohmann::json -----------------------------
// Every failure is a FormatError naming the file (and the field): a syntax error with
// nlohmann's message (which gives the byte offset), a value of the wrong type, nesting deeper
// than kMaxJsonDepth (so that nothing recursive that walks the value, nlohmann's own dump()
// and comparisons included, can be driven off the stack by a file). No nlohmann exception
// leaves these functions.

using Json = nlohmann::json;

inline constexpr int kMaxJsonDepth = 128;  // containers nested below the top-level value

inline Json parse_json(std::string_view text, const std::string& what) {
  // The callback sees each container open at its depth (0 for the top level) before its contents.
  const Json::parser_callback_t depth_limit = [&what](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) && depth > kMaxJsonDepth)
      throw FormatError(what + ": nesting deeper than " + std::to_string(kMaxJsonDepth));
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), depth_limit);
  } catch (const Json::exception& e) {
    throw FormatError(what + ": " + e.what());
  }
}

namespace detail {

inline const char* json_type_name(const Json& j) {
  return j.is_number_integer() || j.is_number_unsigned() ? "an integer" : j.is_number_float() ? "a number" : j.type_name();
}

}  // namespace detail

inline const Json::array_t& json_array(const Json& j, std::string_view what) {
  if (!j.is_array()) throw FormatError(std::string(what) + ": expected an array, got " + detail::json_type_name(j));
  return j.get_ref<const Json::array_t&>();
}

inline const Json::object_t& json_object(const Json& j, std::string_view what) {
  if (!j.is_object()) throw FormatError(std::string(what) + ": expected an object, got " + detail::json_type_name(j));
  return j.get_ref<const Json::object_t&>();
}

inline const std::string& json_string(const Json& j, std::string_view what) {
  if (!j.is_string()) throw FormatError(std::string(what) + ": expected a string, got " + detail::json_type_name(j));
  return j.get_ref<const std::string&>();
}

// An integer-valued number in [lo, hi] (1, -2, also 1.0 and 1E+2, as JSON does not tell them apart).
inline std::int64_t json_int(const Json& j, std::string_view what, std::int64_t lo = INT32_MIN, std::int64_t hi = INT32_MAX) {
  auto out_of_range = [&](const std::string& got) {
    return FormatError(std::string(what) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                       "], got " + got);
  };
  if (j.is_number_unsigned()) {
    const std::uint64_t u = j.get<std::uint64_t>();
    if (hi < 0 || u > static_cast<std::uint64_t>(hi) || static_cast<std::int64_t>(u) < lo) throw out_of_range(std::to_string(u));
    return static_cast<std::int64_t>(u);
  }
  if (j.is_number_integer()) {
    const std::int64_t i = j.get<std::int64_t>();
    if (i < lo || i > hi) throw out_of_range(std::to_string(i));
    return i;
  }
  if (j.is_number_float()) {
    const double d = j.get<double>();
    if (!(d == std::floor(d)) || d < static_cast<double>(lo) || d > static_cast<double>(hi)) throw out_of_range(std::to_string(d));
    return static_cast<std::int64_t>(d);
  }
  throw FormatError(std::string(what) + ": expected an integer, got " + detail::json_type_name(j));
}

// A CTranslate2 model directory: model.bin, config.json (optional keys), and
// vocabulary.json (a JSON array) or vocabulary.txt (one token per line).
struct Ct2ModelDir {
  Ct2ModelBin model;
  Json config = Json::object();         // {} when config.json is absent
  std::vector<std::string> vocabulary;  // token strings as stored (GPT-2 byte-level form)
};

inline std::vector<std::string> parse_vocabulary_txt(std::string_view text) {
  std::vector<std::string> tokens;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    tokens.emplace_back(line);
    start = end + 1;
  }
  return tokens;
}

inline std::vector<std::string> parse_vocabulary_json(std::string_view text, const std::string& what) {
  const Json j = parse_json(text, what);
  std::vector<std::string> tokens;
  for (const Json& t : json_array(j, what)) tokens.push_back(json_string(t, what + " entry"));
  return tokens;
}

// config.json: a JSON object, every key optional.
inline Json parse_ct2_config(std::string_view text, const std::string& what) {
  Json config = parse_json(text, what);
  json_object(config, what);
  return config;
}

inline Ct2ModelDir load_ct2_model_dir(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw IoError("model directory '" + dir.string() + "' does not exist");
  Ct2ModelDir out;
  out.model = Ct2ModelBin::parse(std::make_shared<const MappedFile>((dir / "model.bin").string()));
  const auto cfg = dir / "config.json";
  if (std::filesystem::exists(cfg)) {
    const auto b = read_file_bytes(cfg.string());
    out.config = parse_ct2_config(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), cfg.string());
  }
  const auto vjson = dir / "vocabulary.json", vtxt = dir / "vocabulary.txt";
  if (std::filesystem::exists(vjson)) {
    const auto b = read_file_bytes(vjson.string());
    out.vocabulary = parse_vocabulary_json(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()), vjson.string());
  } else if (std::filesystem::exists(vtxt)) {
    const auto b = read_file_bytes(vtxt.string());
    out.vocabulary = parse_vocabulary_txt(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  } else {
    throw IoError("model directory '" + dir.string() + "' has neither vocabulary.json nor vocabulary.txt");
  }
  return out;
}

}  // namespace polyattn::whisper
