// train/shard_checkpoint.h: the optimizer state of a data-parallel checkpoint saved per
// shard: each rank writes optimizer-RRRRR-of-NNNNN.safetensors (its range of the fp32
// master, AdamW m and v) and trainer_state.json records the layout (ranks, the partition
// offsets, the parameter count). Reading any range [begin, end) takes the overlapping
// parts of the shard files, so a checkpoint written at N ranks resumes at any other.
// defines: ShardLayout, optimizer_shard_file, write_optimizer_shard, read_optimizer_range,
//          shard_layout_to_json, shard_layout_from_json
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json_fwd.h"

namespace octet::train {

struct ShardLayout {
  std::vector<int64_t> offsets;  // ranks + 1: rank r held parameters [offsets[r], offsets[r+1])
  int64_t parameters = 0;        // == offsets.back()
  int ranks() const { return static_cast<int>(offsets.size()) - 1; }
  friend bool operator==(const ShardLayout&, const ShardLayout&) = default;
};

// "optimizer-00001-of-00002.safetensors"
std::string optimizer_shard_file(int rank, int ranks);

// Writes one shard file atomically (io/atomic_file.h): master, m and v, f32 [n] each (on the
// CPU or a CUDA device), the parameters [begin, begin + n) of the layout.
void write_optimizer_shard(const std::string& path, int64_t begin, const Tensor& master,
                           const Tensor& m, const Tensor& v);

// Parameters [begin, end) of the checkpoint in step_dir into master, m and v (f32 [end -
// begin] each; an empty tensor is skipped), from the shard files overlapping the range.
void read_optimizer_range(const std::string& step_dir, const ShardLayout& layout, int64_t begin,
                          int64_t end, const Tensor& master, const Tensor& m, const Tensor& v);

Json shard_layout_to_json(const ShardLayout& layout);
// Checks: offsets non-decreasing from 0 to parameters; `where` names the file in errors.
ShardLayout shard_layout_from_json(const Json& js, const std::string& where);

}  // namespace octet::train
