// fuzz/fuzz_shard.cpp: token shards and the set of them a run reads (find_shards, the
// loader over several shards, seek to a saved position) on any bytes. The first 8 bytes
// choose the loader's batch, sequence length, seed, shuffle, rank/world and the position
// to seek to; the rest is the shard file, present twice in the folder (train_0, train_1).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "data/loader.h"
#include "data/shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet;
  if (size < 8) return 0;
  const uint8_t* c = data;
  data += 8, size -= 8;
  static const std::string dir = octet::fuzz::fuzz_file_path("shards");
  std::filesystem::create_directories(dir);
  {
    const fuzz::FuzzFile a("shards/train_0.bin", data, size), b("shards/train_1.bin", data, size);
    try {
      data::ShardView view(a.path());
      std::vector<int32_t> tokens(std::min<uint64_t>(view.count(), 4096));
      view.read(0, tokens);
      if (view.count() > tokens.size()) {
        view.read(view.count() - tokens.size(), tokens, true);
      }
      (void)data::shard_read_header(a.path());
    } catch (const Error&) {
    }
    try {
      data::LoaderConfig lc;
      lc.batch = 1 + c[0] % 8;
      lc.seq_len = 1 + c[1] % 64;
      lc.seed = c[2];
      lc.shuffle = c[3] & 1;
      lc.world = 1 + (c[3] >> 1) % 4;
      lc.rank = (c[3] >> 3) % lc.world;
      data::TokenLoader loader(data::find_shards(dir, "train"), lc);
      Buffer buf(Device::cpu(), static_cast<size_t>(2 * lc.batch * lc.seq_len) * 4);
      const Tensor inputs = buf.view(DType::i32, {lc.batch, lc.seq_len}, 0);
      const Tensor targets = buf.view(DType::i32, {lc.batch, lc.seq_len},
                                      static_cast<size_t>(lc.batch * lc.seq_len) * 4);
      for (int i = 0; i < 1 + c[4] % 4; ++i) loader.next(inputs, targets);
      loader.seek({static_cast<uint64_t>(c[5]), static_cast<uint64_t>(c[6] | c[7] << 8)});
      loader.next(inputs, targets);
    } catch (const Error&) {
    }
  }
  return 0;
}
