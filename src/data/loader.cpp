// data/loader.cpp: the deterministic, resumable batch loader.
#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "data/random.h"

namespace octet::data {
namespace {

constexpr uint64_t kShuffleStream = 0x53687566666C6500ull;  // "Shuffle"

void check_config(const LoaderConfig& c) {
  OCTET_CHECK(c.batch >= 1, "loader", "batch must be positive, got ", c.batch);
  OCTET_CHECK(c.seq_len >= 1, "loader", "seq_len must be positive, got ", c.seq_len);
  OCTET_CHECK(c.world >= 1 && c.rank >= 0 && c.rank < c.world, "loader", "rank ", c.rank,
              " is not in [0, world = ", c.world, ")");
}

}  // namespace

TokenLoader::TokenLoader(const std::vector<std::string>& shard_paths, const LoaderConfig& config)
    : config_(config) {
  check_config(config);
  OCTET_CHECK(!shard_paths.empty(), "loader", "no shards given");
  shards_.reserve(shard_paths.size());
  for (const std::string& path : shard_paths) {
    shards_.emplace_back(path);
    const ShardView& s = shards_.back();
    OCTET_CHECK(s.vocab_size() == shards_.front().vocab_size(), "loader", path, ": vocab_size ",
                s.vocab_size(), " differs from ", shards_.front().path(), "'s ",
                shards_.front().vocab_size(), "; shards of one run share one tokenizer");
    segments_.push_back({static_cast<int64_t>(shards_.size() - 1), s.count(), 0});
  }
  vocab_size_ = shards_.front().vocab_size();
  init();
}

TokenLoader::TokenLoader(std::vector<int32_t> tokens, uint32_t vocab_size,
                         const LoaderConfig& config)
    : config_(config), memory_(std::move(tokens)), vocab_size_(vocab_size) {
  check_config(config);
  for (size_t i = 0; i < memory_.size(); ++i)
    OCTET_CHECK(memory_[i] >= 0 && static_cast<uint32_t>(memory_[i]) < vocab_size, "loader",
                "token ", memory_[i], " at index ", i, " is beyond the vocabulary (", vocab_size,
                ")");
  segments_.push_back({-1, memory_.size(), 0});
  init();
}

void TokenLoader::init() {
  const auto s = static_cast<uint64_t>(config_.seq_len);
  for (Segment& seg : segments_) {
    seg.first_sequence = total_sequences_;
    total_sequences_ += seg.count >= s + 1 ? (seg.count - 1) / s : 0;
    total_tokens_ += seg.count;
  }
  OCTET_CHECK(total_sequences_ > 0, "loader", "the data (", total_tokens_, " tokens in ",
              segments_.size(), " part(s)) holds no sequence of seq_len + 1 = ", s + 1,
              " tokens; lower seq_len or add data");
  order_.resize(static_cast<size_t>(total_sequences_));
}

void TokenLoader::seek(LoaderPosition position) {
  OCTET_CHECK(position.index < total_sequences_, "loader", "position index ", position.index,
              " is beyond the ", total_sequences_,
              " sequences of an epoch; was it saved with other data or another seq_len?");
  position_ = position;
}

uint64_t TokenLoader::sequence_at(uint64_t epoch, uint64_t index) {
  if (!config_.shuffle) return index;
  if (order_epoch_ != epoch) {
    std::iota(order_.begin(), order_.end(), uint64_t{0});
    Rng rng(derive_seed(config_.seed ^ kShuffleStream, epoch));
    shuffle_in_place(std::span<uint64_t>(order_), rng);
    order_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(index)];
}

void TokenLoader::read(uint64_t sequence, int32_t* inputs, int32_t* targets) const {
  const auto seg =
      std::upper_bound(segments_.begin(), segments_.end(), sequence,
                       [](uint64_t q, const Segment& g) { return q < g.first_sequence; }) -
      1;
  const auto s = static_cast<size_t>(config_.seq_len);
  const uint64_t start = (sequence - seg->first_sequence) * s;
  if (seg->shard < 0) {
    std::memcpy(inputs, memory_.data() + start, s * sizeof(int32_t));
  } else {
    shards_[static_cast<size_t>(seg->shard)].read(start, std::span<int32_t>(inputs, s));
  }
  std::memcpy(targets, inputs + 1, (s - 1) * sizeof(int32_t));
  if (seg->shard < 0) {
    targets[s - 1] = memory_[static_cast<size_t>(start + s)];
  } else {
    shards_[static_cast<size_t>(seg->shard)].read(start + s,
                                                  std::span<int32_t>(targets + s - 1, 1));
  }
}

void TokenLoader::next(const Tensor& inputs, const Tensor& targets) {
  const Shape want{config_.batch, config_.seq_len};
  for (const Tensor* t : {&inputs, &targets})
    OCTET_CHECK(t->dtype == DType::i32 && t->shape == want && t->device.is_cpu() && t->data,
                "loader", t == &inputs ? "inputs" : "targets", " must be i32", want.str(),
                " on the cpu, got ", t->str());
  const auto b = static_cast<uint64_t>(config_.batch);
  const uint64_t n = total_sequences_;
  // This rank's block of the step: world x batch sequences from the current position.
  uint64_t epoch =
      position_.epoch + (position_.index + b * static_cast<uint64_t>(config_.rank)) / n;
  uint64_t index = (position_.index + b * static_cast<uint64_t>(config_.rank)) % n;
  const auto s = static_cast<size_t>(config_.seq_len);
  for (uint64_t row = 0; row < b; ++row) {
    read(sequence_at(epoch, index), inputs.as<int32_t>() + row * s,
         targets.as<int32_t>() + row * s);
    if (++index == n) {
      index = 0;
      ++epoch;
    }
  }
  const uint64_t step = b * static_cast<uint64_t>(config_.world);
  position_.epoch += (position_.index + step) / n;
  position_.index = (position_.index + step) % n;
}

std::vector<std::string> find_shards(const std::string& dir, const std::string& split) {
  namespace fs = std::filesystem;
  std::error_code ec;
  OCTET_CHECK(fs::is_directory(dir, ec), "loader", "shard directory '", dir, "' does not exist");
  std::vector<std::string> names;
  const std::string prefix = split + "_";
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !name.starts_with(prefix) || !name.ends_with(".bin")) continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 4);
    if (digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    names.push_back(name);
  }
  OCTET_CHECK(!names.empty(), "loader", "no ", prefix, "NNN.bin shards in '", dir, "'");
  // Numeric order: shorter numbers first, then lexicographic (train_999 before train_1000).
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::vector<std::string> paths;
  for (const auto& name : names) paths.push_back((fs::path(dir) / name).string());
  return paths;
}

}  // namespace octet::data
