//===- Npy.cpp - NumPy .npy files for attn-run and tests ------------------===//

#include "runtime/Npy.h"
#include "runtime/CheckedSize.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include <sys/stat.h>
#include <unistd.h>

namespace attn::npy {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

/// A tiny reader for the Python dict literal of a .npy header, e.g.
/// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
public:
  explicit HeaderParser(const std::string &text) : text(text) {}

  bool parse(std::string &descr, bool &fortranOrder,
             std::vector<int64_t> &shape, std::string &error) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    skipSpace();
    if (!consume('{'))
      return fail("expected '{'", error);
    while (true) {
      skipSpace();
      if (consume('}'))
        break;
      std::string key;
      if (!quoted(key))
        return fail("expected a quoted key", error);
      skipSpace();
      if (!consume(':'))
        return fail("expected ':' after '" + key + "'", error);
      skipSpace();
      if (key == "descr") {
        if (!quoted(descr))
          return fail("expected a quoted 'descr'", error);
        haveDescr = true;
      } else if (key == "fortran_order") {
        if (text.compare(pos, 4, "True") == 0) {
          fortranOrder = true;
          pos += 4;
        } else if (text.compare(pos, 5, "False") == 0) {
          fortranOrder = false;
          pos += 5;
        } else {
          return fail("expected True or False for 'fortran_order'", error);
        }
        haveOrder = true;
      } else if (key == "shape") {
        if (!tuple(shape))
          return fail("expected a tuple of non-negative integers for "
                      "'shape'",
                      error);
        haveShape = true;
      } else {
        return fail("unknown key '" + key + "'", error);
      }
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume('}'))
        break;
      return fail("expected ',' or '}'", error);
    }
    if (!haveDescr || !haveOrder || !haveShape)
      return fail("needs 'descr', 'fortran_order' and 'shape'", error);
    return true;
  }

private:
  bool fail(const std::string &what, std::string &error) {
    error = "malformed .npy header (" + what + "): " + text;
    while (!error.empty() &&
           std::isspace(static_cast<unsigned char>(error.back())))
      error.pop_back();
    return false;
  }
  void skipSpace() {
    while (pos < text.size() &&
           std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool consume(char c) {
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool quoted(std::string &out) {
    if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"'))
      return false;
    char quote = text[pos++];
    size_t end = text.find(quote, pos);
    if (end == std::string::npos)
      return false;
    out = text.substr(pos, end - pos);
    pos = end + 1;
    return true;
  }
  bool tuple(std::vector<int64_t> &out) {
    out.clear();
    if (!consume('('))
      return false;
    while (true) {
      skipSpace();
      if (consume(')'))
        return true;
      if (pos >= text.size() ||
          !std::isdigit(static_cast<unsigned char>(text[pos])))
        return false;
      int64_t value = 0;
      while (pos < text.size() &&
             std::isdigit(static_cast<unsigned char>(text[pos]))) {
        value = value * 10 + (text[pos++] - '0');
        if (value > (int64_t(1) << 48))
          return false;
      }
      out.push_back(value);
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume(')'))
        return true;
      return false;
    }
  }

  const std::string &text;
  size_t pos = 0;
};

} // namespace

const char *descriptor(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "<f4";
  case DType::I32:
    return "<i4";
  case DType::F16:
    return "<f2";
  }
  return "?";
}

size_t elementSize(DType dtype) { return dtype == DType::F16 ? 2 : 4; }

int64_t Array::numElements() const {
  return checkedTensorBytes(shape, 1).value_or(0);
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

bool parse(const uint8_t *bytes, size_t size, Array &out, std::string &error) {
  if (size < kMagicSize + 4 || std::memcmp(bytes, kMagic, kMagicSize) != 0) {
    error = "not a .npy file (no \\x93NUMPY magic)";
    return false;
  }
  const uint8_t major = bytes[6];
  size_t headerLength, headerStart;
  if (major == 1) {
    headerLength = bytes[8] | (size_t(bytes[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) {
      error = "truncated .npy header";
      return false;
    }
    headerLength = bytes[8] | (size_t(bytes[9]) << 8) |
                   (size_t(bytes[10]) << 16) | (size_t(bytes[11]) << 24);
    headerStart = 12;
  } else {
    error = "unsupported .npy format version " + std::to_string(major) + "." +
            std::to_string(bytes[7]) + " (expected 1.0, 2.0 or 3.0)";
    return false;
  }
  if (headerStart + headerLength > size) {
    error = "truncated .npy header: it claims " + std::to_string(headerLength) +
            " bytes, the file has " + std::to_string(size - headerStart);
    return false;
  }
  std::string header(reinterpret_cast<const char *>(bytes) + headerStart,
                     headerLength);
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
  if (!HeaderParser(header).parse(descr, fortranOrder, shape, error))
    return false;
  if (descr == "<f4")
    out.dtype = DType::F32;
  else if (descr == "<i4")
    out.dtype = DType::I32;
  else if (descr == "<f2")
    out.dtype = DType::F16;
  else {
    error = "unsupported dtype '" + descr +
            "': expected '<f4' (float32), '<i4' (int32) or '<f2' (float16)";
    return false;
  }
  if (fortranOrder) {
    error = "array is in Fortran order: expected C order (numpy's default; "
            "use np.ascontiguousarray)";
    return false;
  }
  out.shape = shape;
  const size_t dataStart = headerStart + headerLength;
  std::optional<int64_t> dataBytes =
      checkedTensorBytes(shape, static_cast<int64_t>(elementSize(out.dtype)));
  if (!dataBytes) {
    error = "shape " + formatShape(shape) + " of " + descr +
            " holds more than 2^63 bytes";
    return false;
  }
  const uint64_t expected = static_cast<uint64_t>(*dataBytes);
  const uint64_t found = size - dataStart;
  if (found != expected) {
    error = (found < expected ? "truncated data: " : "trailing data: ") +
            std::string("shape ") + formatShape(shape) + " of " + descr +
            " needs " + std::to_string(expected) + " bytes, found " +
            std::to_string(found);
    return false;
  }
  out.data.assign(bytes + dataStart, bytes + size);
  return true;
}

std::vector<uint8_t> serialize(const Array &array) {
  std::string header =
      std::string("{'descr': '") + descriptor(array.dtype) +
      "', 'fortran_order': False, 'shape': " + formatShape(array.shape) + ", }";
  // Pad with spaces and a final newline so the data starts on a 64-byte
  // boundary, as NumPy does.
  size_t total = kMagicSize + 4 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> bytes(kMagic, kMagic + kMagicSize);
  bytes.push_back(1);
  bytes.push_back(0);
  bytes.push_back(uint8_t(header.size() & 0xff));
  bytes.push_back(uint8_t(header.size() >> 8));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), array.data.begin(), array.data.end());
  return bytes;
}

bool readFile(const std::string &path, Array &out, std::string &error) {
  FILE *file = std::fopen(path.c_str(), "rb");
  if (!file) {
    error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
    bytes.insert(bytes.end(), buffer, buffer + n);
  bool readError = std::ferror(file);
  std::fclose(file);
  if (readError) {
    error = path + ": read error";
    return false;
  }
  if (!parse(bytes.data(), bytes.size(), out, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

bool writeFile(const std::string &path, const Array &array,
               std::string &error) {
  std::vector<uint8_t> bytes = serialize(array);
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file) {
    error = path + ": cannot create: " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  ok = (std::fclose(file) == 0) && ok;
  if (!ok)
    error = path + ": write error";
  return ok;
}

OutputFiles::~OutputFiles() {
  for (const std::string &temporary : temporaries)
    if (!temporary.empty())
      ::unlink(temporary.c_str());
}

bool OutputFiles::create(const std::vector<std::string> &destinations,
                         std::string &error) {
  // Files made by mkstemp are private; outputs get the mode a plain
  // create would give them.
  mode_t mask = ::umask(0);
  ::umask(mask);
  for (const std::string &path : destinations) {
    std::string pattern = path + ".tmp-XXXXXX";
    int fd = ::mkstemp(pattern.data());
    if (fd < 0) {
      error = path + ": cannot create: " + std::strerror(errno);
      return false;
    }
    ::fchmod(fd, 0666 & ~mask);
    ::close(fd);
    paths.push_back(path);
    temporaries.push_back(pattern);
  }
  return true;
}

bool OutputFiles::write(size_t index, const Array &array, std::string &error) {
  if (writeFile(temporaries[index], array, error))
    return true;
  // Name the destination, not the temporary file.
  error = paths[index] + error.substr(temporaries[index].size());
  return false;
}

bool OutputFiles::commit(std::string &error) {
  // A rename within one directory does not fail once the temporary file
  // could be made there, short of the directory changing meanwhile.
  for (size_t i = 0; i < paths.size(); ++i) {
    if (std::rename(temporaries[i].c_str(), paths[i].c_str()) != 0) {
      error = paths[i] + ": cannot write: " + std::strerror(errno);
      return false;
    }
    temporaries[i].clear();
  }
  return true;
}

} // namespace attn::npy
