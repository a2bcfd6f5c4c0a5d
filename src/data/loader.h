// data/loader.h: a deterministic, resumable batch loader over token shards or an
// in-memory token stream (the synthetic corpus): batches of inputs and shifted targets.
// defines: LoaderConfig, LoaderPosition, TokenLoader, find_shards
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/shard.h"

namespace octet::data {

struct LoaderConfig {
  int64_t batch = 8;      // B: sequences per batch on this rank
  int64_t seq_len = 256;  // S: inputs per sequence; a sequence reads S + 1 tokens
  uint64_t seed = 0;      // the per-epoch shuffles derive from it
  bool shuffle = true;    // false: sequences in file order, every epoch (validation)
  int rank = 0;           // data parallel: each step takes world x batch sequences of the
  int world = 1;          // epoch's order, and rank r gets the r-th block of `batch`
};

// Where the loader is: `index` sequences of epoch `epoch` have been handed out. Saving it
// beside a checkpoint and seeking to it later replays exactly the same batches.
struct LoaderPosition {
  uint64_t epoch = 0;
  uint64_t index = 0;
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

// A sequence is S + 1 consecutive tokens of one shard starting at a multiple of S (so
// consecutive sequences share one token, and none crosses a shard boundary). Each epoch
// visits every sequence once, in an order shuffled by Fisher-Yates from a generator
// seeded by (seed, epoch) and using only integer RNG words, so the order is the same on
// every machine and standard library. A batch that reaches the end of an epoch continues
// into the next one. Batches are written into caller-owned tensors: no allocation per batch.
class TokenLoader {
 public:
  // Memory-maps the shards (in the order given; all must share one vocabulary).
  TokenLoader(const std::vector<std::string>& shard_paths, const LoaderConfig& config);
  // Owns an in-memory stream, e.g. synthetic_split(...).train; every token must be below
  // vocab_size.
  TokenLoader(std::vector<int32_t> tokens, uint32_t vocab_size, const LoaderConfig& config);

  // Writes the next batch and advances: inputs[b, t] = x[start_b + t] and
  // targets[b, t] = x[start_b + t + 1]. Both must be i32 [batch, seq_len] on the CPU.
  // Tokens read from shards are checked against the vocabulary (an error names the file).
  void next(const Tensor& inputs, const Tensor& targets);

  LoaderPosition position() const { return position_; }
  // Moves to a saved position; index must be below sequences_per_epoch().
  void seek(LoaderPosition position);

  uint64_t sequences_per_epoch() const { return total_sequences_; }
  uint64_t tokens() const { return total_tokens_; }
  uint32_t vocab_size() const { return vocab_size_; }
  const LoaderConfig& config() const { return config_; }

 private:
  struct Segment {
    int64_t shard;            // index into shards_; -1 for the in-memory stream
    uint64_t count;           // tokens
    uint64_t first_sequence;  // global number of its first sequence
  };
  void init();
  uint64_t sequence_at(uint64_t epoch, uint64_t index);  // the epoch's index-th sequence
  void read(uint64_t sequence, int32_t* inputs, int32_t* targets) const;

  LoaderConfig config_;
  std::vector<ShardView> shards_;
  std::vector<int32_t> memory_;
  std::vector<Segment> segments_;
  uint32_t vocab_size_ = 0;
  uint64_t total_sequences_ = 0;
  uint64_t total_tokens_ = 0;
  LoaderPosition position_;
  std::vector<uint64_t> order_;  // the shuffled order of order_epoch_
  uint64_t order_epoch_ = UINT64_MAX;
};

// The shards of one split in `dir`, e.g. split "train" finds train_000.bin, train_001.bin,
// ... in numeric order. Throws when there is none.
std::vector<std::string> find_shards(const std::string& dir, const std::string& split);

}  // namespace octet::data
