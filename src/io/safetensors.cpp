// io/safetensors.cpp: the safetensors writer (through AtomicFile) and the validating reader.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <numeric>
#include <set>
#include <system_error>
#include <utility>

#include "core/buffer.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_fields.h"

namespace octet {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

// The one table between octet dtypes and safetensors dtype names.
struct SafetensorsDType {
  DType dtype;
  const char* name;
};
constexpr SafetensorsDType kDTypes[] = {
    {DType::f32, "F32"},      {DType::bf16, "BF16"},    {DType::f16, "F16"},
    {DType::e4m3, "F8_E4M3"}, {DType::e5m2, "F8_E5M2"}, {DType::e8m0, "F8_E8M0"},
    {DType::i32, "I32"},      {DType::u8, "U8"},
};
constexpr const char* kKnownNames = "F32, BF16, F16, F8_E4M3, F8_E5M2, F8_E8M0, I32, U8";

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr size_t kStagingBytes = size_t{8} << 20;  // host bounce buffer for device tensors

[[noreturn]] void fail_file(const std::string& path, const std::string& what) {
  OCTET_FAIL("safetensors", path, ": ", what);
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string offsets_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

void pread_exact(int fd, void* dst, size_t bytes, uint64_t offset, const std::string& path) {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n =
        ::pread(fd, out, std::min<size_t>(bytes, size_t{1} << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fail_file(path, "read failed at byte " + std::to_string(offset) + ": " +
                          std::error_code(errno, std::generic_category()).message());
    }
    if (n == 0) {
      fail_file(path, "unexpected end of file at byte " + std::to_string(offset) +
                          "; was the file truncated after it was opened?");
    }
    out += n, offset += static_cast<uint64_t>(n), bytes -= static_cast<size_t>(n);
  }
}

// A JSON integer in [0, INT64_MAX]: a size or an offset.
bool is_index(const Json& v) {
  return v.is_number_unsigned() ? v.get<uint64_t>() <= INT64_MAX
                                : v.is_number_integer() && v.get<int64_t>() >= 0;
}

// Parses and checks one header entry; `data_bytes` is the size of the data section.
SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const Json& value,
                             uint64_t data_bytes) {
  const std::string tensor = "tensor '" + name + "'";
  const std::string where = "[safetensors] " + path + ": " + tensor;
  if (!value.is_object()) {
    fail_file(path, tensor + ": expected an object with dtype, shape and data_offsets, got a " +
                        value.type_name());
  }
  check_known_keys(value, {"dtype", "shape", "data_offsets"}, where);
  SafetensorsEntry e;
  e.name = name;
  const std::string dtype = get_string(value, "dtype", where);
  const std::optional<DType> known = dtype_from_safetensors_name(dtype);
  if (!known) {
    fail_file(path, tensor + ": unsupported dtype '" + dtype + "'; octet reads " + kKnownNames);
  }
  e.dtype = *known;

  const Json& shape = get_array(value, "shape", where);
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& d : shape) {
    if (!is_index(d)) {
      fail_file(path,
                tensor + ": shape must be an array of non-negative integers, got " + shape.dump());
    }
    e.dims.push_back(d.get<int64_t>());
    overflow |= __builtin_mul_overflow(numel, d.get<uint64_t>(), &numel);
  }
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, uint64_t{dtype_size(e.dtype)}, &nbytes);
  if (overflow) fail_file(path, tensor + ": shape " + shape.dump() + " is too large");

  const Json& offsets = get_array(value, "data_offsets", where);
  if (offsets.size() != 2 || !is_index(offsets[0]) || !is_index(offsets[1]) ||
      offsets[1].get<int64_t>() < offsets[0].get<int64_t>()) {
    fail_file(path, tensor + ": data_offsets must be [begin, end] with 0 <= begin <= end, got " +
                        offsets.dump());
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.end - e.begin != nbytes) {
    fail_file(path, tensor + ": data_offsets " + offsets_str(e.begin, e.end) +
                        " do not match shape " + dims_str(e.dims) + " of " + dtype + " (" +
                        std::to_string(nbytes) + " bytes)");
  }
  if (e.end > data_bytes) {
    fail_file(path, tensor + ": data_offsets " + offsets_str(e.begin, e.end) +
                        " extend beyond the data section (" + std::to_string(data_bytes) +
                        " bytes); the file is truncated or its header is wrong");
  }
  return e;
}

// The tensors must tile the data section: sorted by offset, each starts where the previous
// ends, and the last ends at the end of the file (no overlaps, no unused bytes).
void check_layout(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                  uint64_t data_bytes) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t covered = 0;
  const SafetensorsEntry* last = nullptr;  // the tensor that reaches furthest so far
  for (const SafetensorsEntry* e : sorted) {
    if (e->begin < covered) {
      fail_file(path, "tensors '" + last->name + "' " + offsets_str(last->begin, last->end) +
                          " and '" + e->name + "' " + offsets_str(e->begin, e->end) + " overlap");
    }
    if (e->begin > covered) {
      fail_file(path, "bytes " + offsets_str(covered, e->begin) +
                          " of the data section belong to no tensor (before tensor '" + e->name +
                          "'); safetensors tensors must be packed");
    }
    if (e->end > covered || last == nullptr) covered = e->end, last = e;
  }
  if (covered != data_bytes) {
    fail_file(path, "the data section has " + std::to_string(data_bytes) +
                        " bytes but its tensors end at byte " + std::to_string(covered) +
                        "; the file has trailing data");
  }
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const SafetensorsDType& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  OCTET_FAIL("safetensors", "dtype ", dtype_name(dtype), " has no safetensors name");
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const SafetensorsDType& d : kDTypes) {
    if (name == d.name) return d.dtype;
  }
  return std::nullopt;
}

// ---- writer ------------------------------------------------------------------

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> names;
  for (const NamedTensor& t : tensors) {
    OCTET_CHECK(!t.name.empty() && t.name != "__metadata__", "safetensors", "cannot write ", path,
                ": invalid tensor name '", t.name, "'");
    OCTET_CHECK(names.insert(t.name).second, "safetensors", "cannot write ", path,
                ": tensor name '", t.name, "' appears twice");
    OCTET_CHECK(t.tensor.data != nullptr || t.tensor.nbytes() == 0, "safetensors", "cannot write ",
                path, ": tensor '", t.name, "' ", t.tensor.str(), " has no data");
    safetensors_dtype_name(t.tensor.dtype);  // throws for dtypes without a name
  }
  // Larger elements first: every offset is then a multiple of its tensor's element size.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].tensor.dtype) > dtype_size(tensors[b].tensor.dtype);
  });

  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors[i].tensor;
    Json shape = Json::array();
    for (int d = 0; d < t.shape.rank(); ++d) shape.push_back(t.shape[d]);
    Json entry = Json::object();
    entry["dtype"] = safetensors_dtype_name(t.dtype);
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = Json::array({offset, offset + t.nbytes()});
    header[tensors[i].name] = std::move(entry);
    offset += t.nbytes();
  }
  std::string text = json_dump(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned

  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  AtomicFile file(path);
  file.write(length, sizeof length);
  file.write(text);
  Buffer staging;
  for (size_t i : order) {
    const Tensor& t = tensors[i].tensor;
    if (t.device.is_cpu()) {
      file.write(t.data, t.nbytes());
      continue;
    }
    if (staging.bytes() == 0) staging = Buffer(Device::cpu(), kStagingBytes);
    for (size_t done = 0; done < t.nbytes(); done += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, t.nbytes() - done);
      copy_bytes(staging.data(), Device::cpu(), static_cast<const char*>(t.data) + done, t.device,
                 n);
      file.write(staging.data(), n);
    }
  }
  file.commit();
}

// ---- reader ------------------------------------------------------------------

Shape SafetensorsEntry::shape() const {
  const auto& d = dims;
  switch (d.size()) {
    case 0:
      return Shape{};
    case 1:
      return Shape{d[0]};
    case 2:
      return Shape{d[0], d[1]};
    case 3:
      return Shape{d[0], d[1], d[2]};
    case 4:
      return Shape{d[0], d[1], d[2], d[3]};
    default:
      OCTET_FAIL("safetensors", "tensor '", name, "' has rank ", d.size(), "; octet tensors have",
                 " at most ", Shape::kMaxRank, " dimensions");
  }
}

std::string SafetensorsEntry::shape_str() const {
  return dims_str(dims);
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) {
    fail_file(path, "cannot open: " + std::error_code(errno, std::generic_category()).message());
  }
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0 || S_ISDIR(st.st_mode)) fail_file(path, "not a regular file");
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8) {
    fail_file(path, "the file has " + std::to_string(file_bytes) +
                        " bytes, fewer than the 8-byte header length; not a safetensors file");
  }
  unsigned char length[8];
  pread_exact(f.fd_, length, 8, 0, path);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= uint64_t{length[i]} << (8 * i);
  if (header_bytes > kMaxHeaderBytes) {
    fail_file(path, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                        std::to_string(kMaxHeaderBytes) + " bytes; not a safetensors file?");
  }
  if (header_bytes > file_bytes - 8) {
    fail_file(path, "header length " + std::to_string(header_bytes) + " exceeds the " +
                        std::to_string(file_bytes - 8) +
                        " bytes after the length field; the file is truncated");
  }
  std::string text(header_bytes, '\0');
  pread_exact(f.fd_, text.data(), text.size(), 8, path);
  Json header;
  try {
    header = parse_json(text, "header");
  } catch (const Error& e) {
    std::string_view what = e.what();
    if (what.starts_with("[json] ")) what.remove_prefix(7);
    fail_file(path, "the header is not valid JSON: " + std::string(what));
  }
  if (!header.is_object()) {
    fail_file(path, std::string("the header is a JSON ") + header.type_name() + ", not an object");
  }
  f.data_start_ = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - f.data_start_;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail_file(path, "__metadata__ must be an object of strings");
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) {
          fail_file(path, "__metadata__ field '" + key + "' must be a string, got " + item.dump());
        }
        f.metadata_.emplace(key, item.get<std::string>());
      }
      continue;
    }
    f.entries_.push_back(parse_entry(path, name, value, data_bytes));
    // The JSON parser rejects duplicate keys, so names are unique here.
    f.index_.emplace(name, f.entries_.size() - 1);
  }
  check_layout(path, f.entries_, data_bytes);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      entries_(std::move(other.entries_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    entries_ = std::move(other.entries_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const SafetensorsEntry& e : entries_) out.push_back(e.name);
  return out;
}

const SafetensorsEntry& SafetensorsFile::info(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    std::string known;
    for (size_t i = 0; i < entries_.size() && i < 4; ++i)
      known += (i ? ", '" : "'") + entries_[i].name + "'";
    if (entries_.size() > 4) known += ", ...";
    fail_file(path_, "no tensor named '" + std::string(name) + "' (the file has " +
                         std::to_string(entries_.size()) + " tensors" +
                         (known.empty() ? "" : ": " + known) + ")");
  }
  return entries_[it->second];
}

void SafetensorsFile::read(std::string_view name, const Tensor& dst) const {
  OCTET_CHECK(fd_ >= 0, "safetensors", "read of tensor '", std::string(name),
              "' from a SafetensorsFile that is not open");
  const SafetensorsEntry& e = info(name);
  bool same_shape = static_cast<size_t>(dst.shape.rank()) == e.dims.size();
  for (size_t i = 0; same_shape && i < e.dims.size(); ++i) {
    same_shape = dst.shape[static_cast<int>(i)] == e.dims[i];
  }
  if (dst.dtype != e.dtype || !same_shape) {
    fail_file(path_, "tensor '" + e.name + "' is " + safetensors_dtype_name(e.dtype) + " " +
                         e.shape_str() + " but the destination is " + dst.str() +
                         "; dtype and shape must match");
  }
  if (e.nbytes() == 0) return;
  OCTET_CHECK(dst.data != nullptr, "safetensors", path_, ": tensor '", e.name,
              "': the destination has no memory");
  const uint64_t at = data_start_ + e.begin;
  if (dst.device.is_cpu()) {
    pread_exact(fd_, dst.data, e.nbytes(), at, path_);
    return;
  }
  Buffer staging(Device::cpu(), std::min<size_t>(kStagingBytes, e.nbytes()));
  for (uint64_t done = 0; done < e.nbytes(); done += kStagingBytes) {
    const size_t n = std::min<uint64_t>(kStagingBytes, e.nbytes() - done);
    pread_exact(fd_, staging.data(), n, at + done, path_);
    copy_bytes(static_cast<char*>(dst.data) + done, dst.device, staging.data(), Device::cpu(), n);
  }
}

}  // namespace octet
