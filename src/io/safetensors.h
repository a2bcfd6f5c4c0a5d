// io/safetensors.h: reading and writing the safetensors format (Hugging Face), in which octet
// stores checkpoints under HF LLaMA tensor names.
// defines: NamedTensor, SafetensorsEntry, SafetensorsFile, save_safetensors,
//          safetensors_dtype_name, dtype_from_safetensors_name
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON header
//   {"__metadata__": {"format": "pt"}, "name": {"dtype": "BF16", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8, then the data section; offsets are relative to it and
// the tensors tile it exactly, in order, without gaps (as the reference reader requires).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace octet {

// The safetensors name of a dtype ("F32", "BF16", "F16", "F8_E4M3", "F8_E5M2", "F8_E8M0",
// "I32", "U8"), and back; every octet dtype has one.
const char* safetensors_dtype_name(DType dtype);
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

struct NamedTensor {
  std::string name;
  Tensor tensor;  // on the CPU or a CUDA device
};

// Writes `tensors` and string `metadata` to `path` atomically (io/atomic_file.h): on any error
// the previous file at `path` is left as it was. Tensors are laid out by element size, largest
// first (keeping the given order within a size), so every tensor is aligned to its element
// size in a file whose data section starts at a multiple of 8. Device tensors are copied
// through a small host staging buffer. Names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// One tensor of a file, as its header describes it.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> dims;  // any rank; shape() converts for ranks up to Shape::kMaxRank
  uint64_t begin = 0;         // byte offsets within the data section: [begin, end)
  uint64_t end = 0;

  uint64_t nbytes() const { return end - begin; }
  Shape shape() const;            // throws for ranks above Shape::kMaxRank
  std::string shape_str() const;  // "[64, 32]"
};

// A safetensors file opened for reading. open() reads and validates the whole header; read()
// copies one tensor's bytes into caller-provided memory. The file stays open (so a later
// rename over the path does not change what is read) until the object is destroyed.
class SafetensorsFile {
 public:
  // Validates: file size >= 8; header length within the file and below 100 MB; the header is
  // a JSON object; every entry has exactly dtype, shape and data_offsets, a known dtype,
  // a byte size (shape product x dtype size) equal to end - begin, offsets within the data
  // section, no overlap with another tensor, no unused bytes; names are unique; __metadata__
  // maps strings to strings. Errors name the file, the tensor and the field:
  //   [safetensors] ckpt/model.safetensors: tensor 'model.norm.weight': data_offsets [0, 100]
  //   do not match shape [64] of F32 (256 bytes)
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile() = default;
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Tensor names in header order.
  std::vector<std::string> names() const;
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }
  // Throws naming the file and the tensor when there is no such tensor.
  const SafetensorsEntry& info(std::string_view name) const;
  // Copies tensor `name` into `dst` (CPU or CUDA). dst's dtype and shape must equal the file's.
  void read(std::string_view name, const Tensor& dst) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace octet
