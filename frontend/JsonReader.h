//===- JsonReader.h - Strict JSON reading with paths in errors -*- C++ -*-===//
//
// The reader behind every frontend input (SPEC §3 model descriptions,
// Hugging Face configs): values are read at known JSON paths, and the first
// error names the path ("$.layers[1].num_kv_heads") and what was expected.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_FRONTEND_JSONREADER_H
#define ATTN_FRONTEND_JSONREADER_H

#include "Attn/Limits.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>
#include <string>

namespace mlir::attn::frontend {

namespace json = llvm::json;

/// Reads JSON values at known paths and keeps the first error, which names
/// the path and what was expected. Readers return a default after an error;
/// the caller checks `failed()` once at the end.
class Reader {
public:
  bool failed() const { return error.has_value(); }
  llvm::Error takeError() {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), *error);
  }

  void fail(const std::string &path, const llvm::Twine &message) {
    if (!error)
      error = path + ": " + message.str();
  }

  /// The object at `path`, or null (and an error) if it is something else.
  const json::Object *object(const json::Value *value,
                             const std::string &path) {
    if (const json::Object *o = value ? value->getAsObject() : nullptr)
      return o;
    fail(path, "expected an object, got " + describe(value));
    return nullptr;
  }

  /// Every key of `object` is one of `allowed`.
  void onlyKeys(const json::Object &object, const std::string &path,
                llvm::ArrayRef<llvm::StringRef> allowed) {
    for (const auto &entry : object) {
      llvm::StringRef key = entry.first;
      if (!llvm::is_contained(allowed, key))
        fail(path, "unknown key '" + key +
                       "'; expected one of: " + llvm::join(allowed, ", "));
    }
  }

  std::string string(const json::Object &object, const std::string &path,
                     llvm::StringRef key, std::optional<std::string> fallback) {
    const json::Value *value = object.get(key);
    if (!value) {
      if (!fallback)
        fail(path, "missing required key '" + key + "'");
      return fallback.value_or("");
    }
    if (std::optional<llvm::StringRef> s = value->getAsString())
      return s->str();
    fail(join(path, key), "expected a string, got " + describe(value));
    return "";
  }

  /// An integer in [`minimum`, `maximum`] (the bounds of Limits.h).
  int64_t integer(const json::Object &object, const std::string &path,
                  llvm::StringRef key, std::optional<int64_t> fallback,
                  int64_t minimum, int64_t maximum) {
    const json::Value *value = object.get(key);
    if (!value) {
      if (!fallback)
        fail(path, "missing required key '" + key + "'");
      return fallback.value_or(0);
    }
    std::optional<int64_t> n = value->getAsInteger();
    if (!n || *n < minimum || *n > maximum) {
      std::string expected =
          n && *n > maximum
              ? "an integer <= " + std::to_string(maximum) + " (attn's limit)"
          : minimum == 1 ? "a positive integer"
                         : "an integer >= " + std::to_string(minimum);
      fail(join(path, key),
           "expected " + expected + ", got " + describe(value));
      return fallback.value_or(minimum);
    }
    return *n;
  }

  /// A finite number; `null` or absence give `std::nullopt`.
  std::optional<double> number(const json::Object &object,
                               const std::string &path, llvm::StringRef key) {
    const json::Value *value = object.get(key);
    if (!value || value->kind() == json::Value::Null)
      return std::nullopt;
    std::optional<double> x = value->getAsNumber();
    if (!x || !std::isfinite(*x)) {
      fail(join(path, key), "expected a number, got " + describe(value));
      return std::nullopt;
    }
    return x;
  }

  bool boolean(const json::Object &object, const std::string &path,
               llvm::StringRef key, bool fallback) {
    const json::Value *value = object.get(key);
    if (!value)
      return fallback;
    if (std::optional<bool> b = value->getAsBoolean())
      return *b;
    fail(join(path, key), "expected true or false, got " + describe(value));
    return fallback;
  }

  /// One of `choices` (strings), mapped to its enumerator.
  template <typename Enum>
  Enum choice(const json::Object &object, const std::string &path,
              llvm::StringRef key,
              llvm::ArrayRef<std::pair<llvm::StringRef, Enum>> choices,
              std::optional<Enum> fallback) {
    const json::Value *value = object.get(key);
    if (!value) {
      if (!fallback)
        fail(path, "missing required key '" + key + "'");
      return fallback.value_or(choices.front().second);
    }
    std::optional<llvm::StringRef> s = value->getAsString();
    for (const auto &[name, enumerator] : choices)
      if (s && *s == name)
        return enumerator;
    fail(join(path, key),
         "expected " + quotedChoices(choices) + ", got " + describe(value));
    return fallback.value_or(choices.front().second);
  }

  static std::string join(const std::string &path, llvm::StringRef key) {
    return path + "." + key.str();
  }

  static std::string describe(const json::Value *value) {
    if (!value)
      return "nothing";
    std::string text;
    llvm::raw_string_ostream os(text);
    os << *value;
    if (text.size() > 40)
      text = text.substr(0, 37) + "...";
    return text;
  }

private:
  template <typename Enum>
  static std::string
  quotedChoices(llvm::ArrayRef<std::pair<llvm::StringRef, Enum>> choices) {
    std::string text;
    for (auto [i, choice] : llvm::enumerate(choices)) {
      if (i)
        text += i + 1 == choices.size() ? " or " : ", ";
      text += "\"" + choice.first.str() + "\"";
    }
    return text;
  }

  std::optional<std::string> error;
};

/// Where `text` nests arrays and objects deeper than `maxDepth`: the byte
/// offset of the first bracket too deep, if any. llvm::json parses (and
/// destroys values) recursively, so this runs first.
inline std::optional<size_t> tooDeep(llvm::StringRef text, int64_t maxDepth) {
  int64_t depth = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"')
      inString = true;
    else if ((c == '[' || c == '{') && ++depth > maxDepth)
      return i;
    else if (c == ']' || c == '}')
      --depth;
  }
  return std::nullopt;
}

/// Parses `text`; the error says "$: not valid JSON: ..." like every other
/// frontend error names its path.
inline llvm::Expected<json::Value> parseJson(llvm::StringRef text) {
  auto refuse = [](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "$: " + why);
  };
  if (static_cast<int64_t>(text.size()) > limits::kMaxJsonBytes)
    return refuse("the input has " + llvm::Twine(text.size()) +
                  " bytes; attn reads at most " +
                  llvm::Twine(limits::kMaxJsonBytes));
  if (std::optional<size_t> at = tooDeep(text, limits::kMaxJsonDepth))
    return refuse("arrays and objects nest deeper than " +
                  llvm::Twine(limits::kMaxJsonDepth) + " (at byte " +
                  llvm::Twine(*at) + ")");
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "$: not valid JSON: " +
                                       llvm::toString(parsed.takeError()));
  return parsed;
}

struct ModelDescription;

/// Reads SPEC §3's "speculative" object of `root`, if any, into `model`
/// (its layers read first: a linear layer's tree bounds max_tree_nodes).
void readSpeculative(Reader &reader, const json::Object &root,
                     ModelDescription &model);

} // namespace mlir::attn::frontend

#endif // ATTN_FRONTEND_JSONREADER_H
