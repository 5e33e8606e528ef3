#include "formats/npy.hpp"

#include "storage/durable_files.hpp"

#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

namespace moe::formats {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kPreamble = 10;          // magic, two version bytes, uint16 header length
constexpr std::size_t kAlignment = 64;         // numpy pads the header so the data starts 64-byte aligned
constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

std::size_t item_size(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::b1: return 1;
    case NpyDtype::u2: return 2;
    case NpyDtype::f4:
    case NpyDtype::i4: return 4;
    case NpyDtype::f8:
    case NpyDtype::i8: return 8;
  }
  return 8;
}

// The header's text is the file's: quoted in one line whatever bytes it holds.
[[noreturn]] void fail(const std::string& origin, const std::string& problem) {
  throw NpyError(storage::one_line(origin + ": not a supported .npy file: " + problem));
}

// The header dict: {'key': value, ...} with values 'string', True/False, or a tuple of integers.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& origin) : text_(text), origin_(origin) {}

  struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<std::int64_t> shape;
  };

  Header parse() {
    Header h;
    std::map<std::string, bool> seen{{"descr", false}, {"fortran_order", false}, {"shape", false}};
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        h.descr = string_literal();
      } else if (key == "fortran_order") {
        h.fortran_order = boolean_literal();
      } else if (key == "shape") {
        h.shape = integer_tuple();
      } else {
        fail(origin_, "unknown header key '" + key + "'");
      }
      if (seen[key]) fail(origin_, "header key '" + key + "' appears twice");
      seen[key] = true;
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != text_.size()) fail(origin_, "text after the header dict");
    for (const auto& [key, present] : seen) {
      if (!present) fail(origin_, "header has no '" + key + "'");
    }
    return h;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(origin_, std::string("malformed header: expected '") + c + "' at offset " +
                                    std::to_string(pos_));
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      fail(origin_, "malformed header: expected a quoted string at offset " + std::to_string(pos_));
    }
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail(origin_, "malformed header: unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  bool boolean_literal() {
    skip_space();
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail(origin_, "malformed header: fortran_order must be True or False");
  }
  std::vector<std::int64_t> integer_tuple() {
    std::vector<std::int64_t> dims;
    expect('(');
    while (!peek(')')) {
      skip_space();
      const std::size_t start = pos_;
      std::int64_t value = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        value = value * 10 + (text_[pos_++] - '0');
        if (value > kMaxElements) fail(origin_, "shape dimension too large");
      }
      if (pos_ == start) fail(origin_, "malformed header: shape must be a tuple of non-negative integers");
      dims.push_back(value);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return dims;
  }

  std::string_view text_;
  const std::string& origin_;
  std::size_t pos_ = 0;
};

NpyDtype dtype_of(const std::string& descr, const std::string& origin, bool widened) {
  if (descr == "<f8") return NpyDtype::f8;
  if (descr == "<i8") return NpyDtype::i8;
  if (descr == "|b1") return NpyDtype::b1;
  if (widened) {
    if (descr == "<f4") return NpyDtype::f4;
    if (descr == "<i4") return NpyDtype::i4;
    if (descr == "<u2" || descr == "<V2" || descr == "|V2") return NpyDtype::u2;
    fail(origin, "dtype '" + descr + "' (a dump may use '<f8', '<f4', bfloat16 as '<u2' or '<V2', '<i8', '<i4', '|b1')");
  }
  fail(origin, "dtype '" + descr + "' (the golden format uses only '<f8', '<i8' and '|b1')");
}

// Little-endian values of type V at `data`, widened to W.
template <typename V, typename W>
std::vector<W> widen(std::string_view data, std::size_t count) {
  std::vector<V> raw(count);
  if (count > 0) std::memcpy(raw.data(), data.data(), count * sizeof(V));
  return std::vector<W>(raw.begin(), raw.end());
}

std::int64_t element_count(const std::vector<std::int64_t>& shape, const std::string& origin) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d != 0 && n > kMaxElements / d) fail(origin, "shape has too many elements");
    n *= d;
  }
  return n;
}

}  // namespace

std::string_view npy_descr(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::f8: return "<f8";
    case NpyDtype::i8: return "<i8";
    case NpyDtype::b1: return "|b1";
    case NpyDtype::f4: return "<f4";
    case NpyDtype::i4: return "<i4";
    case NpyDtype::u2: return "<u2";
  }
  return "?";
}

std::int64_t NpyArray::size() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::shape_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<double> NpyArray::as_doubles() const {
  switch (dtype) {
    case NpyDtype::f8:
    case NpyDtype::f4: return reals;
    case NpyDtype::i8:
    case NpyDtype::i4:
    case NpyDtype::u2: return {integers.begin(), integers.end()};
    case NpyDtype::b1: return {booleans.begin(), booleans.end()};
  }
  return {};
}

NpyArray NpyArray::of_reals(std::vector<std::int64_t> shape, std::vector<double> values) {
  NpyArray a;
  a.dtype = NpyDtype::f8;
  a.shape = std::move(shape);
  a.reals = std::move(values);
  if (a.size() != static_cast<std::int64_t>(a.reals.size())) throw NpyError("of_reals: shape and value count differ");
  return a;
}

NpyArray NpyArray::of_integers(std::vector<std::int64_t> shape, std::vector<std::int64_t> values) {
  NpyArray a;
  a.dtype = NpyDtype::i8;
  a.shape = std::move(shape);
  a.integers = std::move(values);
  if (a.size() != static_cast<std::int64_t>(a.integers.size())) {
    throw NpyError("of_integers: shape and value count differ");
  }
  return a;
}

NpyArray NpyArray::of_booleans(std::vector<std::int64_t> shape, std::vector<std::uint8_t> values) {
  NpyArray a;
  a.dtype = NpyDtype::b1;
  a.shape = std::move(shape);
  a.booleans = std::move(values);
  if (a.size() != static_cast<std::int64_t>(a.booleans.size())) {
    throw NpyError("of_booleans: shape and value count differ");
  }
  return a;
}

namespace {

// The preamble and header of `bytes` (at least the first kPreamble + header length bytes of the file).
struct ParsedHeader {
  NpyDtype dtype = NpyDtype::f8;
  std::vector<std::int64_t> shape;
  std::string descr;
  std::size_t data_offset = 0;
};

ParsedHeader parse_header(std::string_view bytes, const std::string& origin, bool widened) {
  if (bytes.size() < kMagic.size() || bytes.substr(0, kMagic.size()) != kMagic) {
    fail(origin, "bad magic (does not start with \\x93NUMPY)");
  }
  if (bytes.size() < kPreamble) fail(origin, "truncated in the preamble");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major != 1 || minor != 0) {
    fail(origin, "format version " + std::to_string(major) + "." + std::to_string(minor) +
                     (major > 1 ? " is newer than" : " is not") + " the supported version 1.0");
  }
  const std::size_t header_len = static_cast<unsigned char>(bytes[8]) |
                                 (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  if (bytes.size() < kPreamble + header_len) fail(origin, "truncated in the header");
  const auto header = HeaderParser(bytes.substr(kPreamble, header_len), origin).parse();
  if (header.fortran_order) fail(origin, "fortran_order is True (only C order is supported)");
  ParsedHeader h;
  h.dtype = dtype_of(header.descr, origin, widened);
  h.shape = header.shape;
  h.descr = header.descr;
  h.data_offset = kPreamble + header_len;
  element_count(h.shape, origin);  // refuses a shape past kMaxElements
  return h;
}

// The data section must be exactly the shape's size: neither truncated nor followed by anything.
void check_data_size(std::size_t have, const ParsedHeader& h, const std::string& origin) {
  const std::size_t need = static_cast<std::size_t>(element_count(h.shape, origin)) * item_size(h.dtype);
  if (have < need) {
    fail(origin, "truncated: the data has " + std::to_string(have) + " bytes, shape " +
                     NpyArray{h.dtype, h.shape, {}, {}, {}}.shape_string() + " of " + h.descr + " needs " +
                     std::to_string(need));
  }
  if (have > need) fail(origin, std::to_string(have - need) + " bytes after the data");
}

NpyArray parse(std::string_view bytes, const std::string& origin, bool widened) {
  const ParsedHeader header = parse_header(bytes, origin, widened);
  NpyArray a;
  a.dtype = header.dtype;
  a.shape = header.shape;
  const std::int64_t n = element_count(a.shape, origin);
  const std::string_view data = bytes.substr(header.data_offset);
  check_data_size(data.size(), header, origin);
  const std::size_t need = static_cast<std::size_t>(n) * item_size(a.dtype);
  const auto count = static_cast<std::size_t>(n);
  // An empty vector's data() may be null, and memcpy with a null pointer is undefined even for 0 bytes.
  switch (a.dtype) {
    case NpyDtype::f8:
      a.reals.resize(count);
      if (need > 0) std::memcpy(a.reals.data(), data.data(), need);
      break;
    case NpyDtype::i8:
      a.integers.resize(count);
      if (need > 0) std::memcpy(a.integers.data(), data.data(), need);
      break;
    case NpyDtype::b1:
      a.booleans.assign(data.begin(), data.end());
      for (std::size_t i = 0; i < count; ++i) {
        if (a.booleans[i] > 1) fail(origin, "boolean element " + std::to_string(i) + " is neither 0 nor 1");
      }
      break;
    case NpyDtype::f4: a.reals = widen<float, double>(data, count); break;
    case NpyDtype::i4: a.integers = widen<std::int32_t, std::int64_t>(data, count); break;
    case NpyDtype::u2: a.integers = widen<std::uint16_t, std::int64_t>(data, count); break;
  }
  return a;
}

}  // namespace

NpyArray parse_npy(std::string_view bytes, const std::string& origin) { return parse(bytes, origin, false); }

std::string serialize_npy(const NpyArray& a) {
  if (a.dtype != NpyDtype::f8 && a.dtype != NpyDtype::f4 && a.dtype != NpyDtype::i8 && a.dtype != NpyDtype::b1)
    throw NpyError("serialize_npy: only '<f8', '<f4', '<i8' and '|b1' are written");
  if (a.size() < 0 || static_cast<std::size_t>(a.size()) !=
                          (a.dtype == NpyDtype::f8 || a.dtype == NpyDtype::f4 ? a.reals.size()
                           : a.dtype == NpyDtype::i8 ? a.integers.size()
                                                     : a.booleans.size())) {
    throw NpyError("serialize_npy: shape " + a.shape_string() + " does not match the number of values");
  }
  std::string shape = "(";
  for (const std::int64_t d : a.shape) shape += std::to_string(d) + ", ";
  if (a.shape.size() > 1) shape.resize(shape.size() - 2);      // (3, 4)
  else if (a.shape.size() == 1) shape.resize(shape.size() - 1);  // (3,)
  shape += ")";
  std::string header = "{'descr': '" + std::string(npy_descr(a.dtype)) + "', 'fortran_order': False, 'shape': " +
                       shape + ", }";
  const std::size_t unpadded = kPreamble + header.size() + 1;
  header.append((kAlignment - unpadded % kAlignment) % kAlignment, ' ');
  header += '\n';

  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  switch (a.dtype) {
    case NpyDtype::f8:
      if (!a.reals.empty()) out.append(reinterpret_cast<const char*>(a.reals.data()), a.reals.size() * 8);
      break;
    case NpyDtype::i8:
      if (!a.integers.empty()) out.append(reinterpret_cast<const char*>(a.integers.data()), a.integers.size() * 8);
      break;
    case NpyDtype::f4:
      for (const double v : a.reals) {
        const auto f = static_cast<float>(v);
        if (static_cast<double>(f) != v && !std::isnan(v))
          throw NpyError("serialize_npy: " + std::to_string(v) + " is not a float32 value");
        out.append(reinterpret_cast<const char*>(&f), sizeof f);
      }
      break;
    case NpyDtype::i4:
    case NpyDtype::u2: break;  // refused above
    case NpyDtype::b1:
      for (const std::uint8_t b : a.booleans) {
        if (b > 1) throw NpyError("serialize_npy: boolean values must be 0 or 1");
        out += static_cast<char>(b);
      }
      break;
  }
  return out;
}

namespace {

// The whole file in one read (a character at a time through istreambuf_iterator took a twelfth of a large
// comparison's time).
// A reader's refusal of `path` as an NpyError: "<path>: cannot open (<why>)" (StorageError's text names the path).
[[noreturn]] void cannot_open(const std::filesystem::path& path, const storage::StorageError& e) {
  std::string why = e.what();
  if (const std::string prefix = path.string() + ": "; why.starts_with(prefix)) why.erase(0, prefix.size());
  throw NpyError(path.string() + ": cannot open (" + why + ")");
}

// The first min(n, size) bytes of `file`.
std::string leading_bytes(storage::RegularFile& file, std::uint64_t n) {
  std::string bytes(static_cast<std::size_t>(std::min(n, file.size())), '\0');
  file.read(bytes.data(), bytes.size());
  return bytes;
}

// The whole file, read only when it is a regular file (storage::RegularFile): a FIFO would block the read until a
// writer came, a device would never end.
std::string file_bytes(const std::filesystem::path& path) {
  try {
    storage::RegularFile file(path);
    return leading_bytes(file, file.size());
  } catch (const storage::StorageError& e) {
    cannot_open(path, e);
  }
}

}  // namespace

NpyArray read_npy(const std::filesystem::path& path) { return parse_npy(file_bytes(path), path.string()); }

NpyHeader read_npy_header_widened(const std::filesystem::path& path) {
  std::string head;
  std::uint64_t file_size = 0;
  try {
    storage::RegularFile file(path);
    file_size = file.size();
    head = leading_bytes(file, kPreamble);
    if (head.size() == kPreamble) {  // the header's length is known: read just the header
      const std::size_t header_len = static_cast<unsigned char>(head[8]) |
                                     (static_cast<std::size_t>(static_cast<unsigned char>(head[9])) << 8);
      head = leading_bytes(file, kPreamble + header_len);
    }
  } catch (const storage::StorageError& e) {
    cannot_open(path, e);
  }
  const ParsedHeader h = parse_header(head, path.string(), true);
  check_data_size(static_cast<std::size_t>(file_size - h.data_offset), h, path.string());
  return {h.dtype, h.shape};
}

NpyArray read_npy_widened(const std::filesystem::path& path) { return parse(file_bytes(path), path.string(), true); }

void write_npy(const std::filesystem::path& path, const NpyArray& array) {
  const std::string bytes = serialize_npy(array);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw NpyError(path.string() + ": cannot write");
}

}  // namespace moe::formats
