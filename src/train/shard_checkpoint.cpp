// train/shard_checkpoint.cpp: per-shard optimizer state files and reading across them.
#include "train/shard_checkpoint.h"

#include <algorithm>
#include <cstdio>

#include "core/buffer.h"
#include "core/error.h"
#include "io/json.h"
#include "io/json_fields.h"
#include "io/safetensors.h"

namespace octet::train {

std::string optimizer_shard_file(int rank, int ranks) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer-%05d-of-%05d.safetensors", rank, ranks);
  return buf;
}

void write_optimizer_shard(const std::string& path, int64_t begin, const Tensor& master,
                           const Tensor& m, const Tensor& v) {
  OCTET_CHECK(master.numel() == m.numel() && m.numel() == v.numel(), "checkpoint",
              "an optimizer shard needs master, m and v of one length, got ", master.str(), ", ",
              m.str(), ", ", v.str());
  save_safetensors(path, {{"master", master}, {"adamw.m", m}, {"adamw.v", v}},
                   {{"begin", std::to_string(begin)}});
}

void read_optimizer_range(const std::string& step_dir, const ShardLayout& layout, int64_t begin,
                          int64_t end, const Tensor& master, const Tensor& m, const Tensor& v) {
  OCTET_CHECK(0 <= begin && begin <= end && end <= layout.parameters, "checkpoint", "parameters [",
              begin, ", ", end, ") are outside the checkpoint's ", layout.parameters);
  for (int r = 0; r < layout.ranks(); ++r) {
    const int64_t b = std::max(begin, layout.offsets[r]), e = std::min(end, layout.offsets[r + 1]);
    if (e <= b) continue;
    const int64_t n = layout.offsets[r + 1] - layout.offsets[r];
    const SafetensorsFile file =
        SafetensorsFile::open(step_dir + "/" + optimizer_shard_file(r, layout.ranks()));
    // The whole shard through host memory, then its overlap with [begin, end).
    std::vector<float> host(static_cast<size_t>(n));
    const Tensor h(host.data(), DType::f32, {n});
    for (auto [name, dst] : {std::pair{"master", &master}, {"adamw.m", &m}, {"adamw.v", &v}}) {
      if (dst->empty()) continue;
      OCTET_CHECK(dst->dtype == DType::f32 && dst->numel() == end - begin, "checkpoint",
                  "reading parameters [", begin, ", ", end, ") of ", name, " needs f32 [",
                  end - begin, "], got ", dst->str());
      file.read(name, h);
      copy_bytes(static_cast<float*>(dst->data) + (b - begin), dst->device,
                 host.data() + (b - layout.offsets[r]), Device::cpu(),
                 static_cast<size_t>(e - b) * 4);
    }
  }
}

Json shard_layout_to_json(const ShardLayout& layout) {
  Json js = Json::object();
  js["ranks"] = layout.ranks();
  js["offsets"] = layout.offsets;
  js["parameters"] = layout.parameters;
  return js;
}

ShardLayout shard_layout_from_json(const Json& js, const std::string& where) {
  check_known_keys(js, {"ranks", "offsets", "parameters"}, where);
  ShardLayout layout;
  layout.parameters = get_int(js, "parameters", where);
  const Json& offsets = get_array(js, "offsets", where);
  for (const Json& o : offsets) {
    OCTET_CHECK(o.is_number_integer(), "checkpoint", where,
                ": optimizer_shards.offsets must be integers");
    layout.offsets.push_back(o.get<int64_t>());
  }
  const int64_t ranks = get_int(js, "ranks", where);
  bool ok = ranks >= 1 && static_cast<int64_t>(layout.offsets.size()) == ranks + 1 &&
            layout.offsets.front() == 0 && layout.offsets.back() == layout.parameters;
  for (size_t i = 1; ok && i < layout.offsets.size(); ++i)
    ok = layout.offsets[i - 1] <= layout.offsets[i];
  OCTET_CHECK(ok, "checkpoint", where,
              ": optimizer_shards must have ranks + 1 non-decreasing offsets from 0 to "
              "parameters");
  return layout;
}

}  // namespace octet::train
