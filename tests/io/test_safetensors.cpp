// tests/io/test_safetensors.cpp: safetensors round trips, the exact byte layout, and the
// reader's rejection of malformed files with errors that name the file, tensor and field.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "temp_dir.h"
#include "testing.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return tmp_.file(name); }

  // Writes a file with the given header text (the length field says `length`, by default the
  // header's size) followed by `data_bytes` zero bytes.
  std::string raw_file(const std::string& header, size_t data_bytes, int64_t length = -1) {
    const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
    bytes += header;
    bytes.append(data_bytes, '\0');
    const std::string p = path("bad.safetensors");
    write_file_atomic(p, bytes);
    return p;
  }

  testing::TempDir tmp_;  // fresh per test, removed afterwards
};

using testing::error_of;

std::vector<std::byte> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::byte*>(t.data);
  return std::vector<std::byte>(p, p + t.nbytes());
}

TEST(SafetensorsDType, NamesMapBothWaysForEveryDType) {
  std::set<std::string> names;
  for (DType d : testing::kAllDTypes) {
    const std::string name = safetensors_dtype_name(d);
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(dtype_from_safetensors_name(name), d) << name;
  }
  EXPECT_STREQ(safetensors_dtype_name(DType::e4m3), "F8_E4M3");
  EXPECT_STREQ(safetensors_dtype_name(DType::bf16), "BF16");
  EXPECT_EQ(dtype_from_safetensors_name("F64"), std::nullopt);
  EXPECT_EQ(dtype_from_safetensors_name("f32"), std::nullopt);
}

TEST_F(SafetensorsTest, RoundTripsEveryDTypeAndOddShape) {
  const std::vector<Shape> shapes = {Shape{},  Shape{0},       Shape{3, 0},
                                     Shape{7}, Shape{3, 5, 7}, Shape{2, 1, 3, 5}};
  testing::Rng rng(testing::fresh_seed());
  std::vector<Buffer> buffers;
  std::vector<NamedTensor> tensors;
  for (DType d : testing::kAllDTypes) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      buffers.push_back(Buffer::for_tensor(Device::cpu(), d, shapes[s]));
      const Tensor t = buffers.back().tensor(d, shapes[s]);
      for (size_t i = 0; i < t.nbytes(); ++i) static_cast<uint8_t*>(t.data)[i] = rng() & 0xFF;
      tensors.push_back({std::string("model.") + dtype_name(d) + "." + std::to_string(s), t});
    }
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "42"}};
  const std::string p = path("all.safetensors");
  save_safetensors(p, tensors, metadata);

  const SafetensorsFile file = SafetensorsFile::open(p);
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.entries().size(), tensors.size());
  for (const NamedTensor& nt : tensors) {
    const SafetensorsEntry& e = file.info(nt.name);
    EXPECT_EQ(e.dtype, nt.tensor.dtype) << nt.name;
    EXPECT_EQ(e.shape(), nt.tensor.shape) << nt.name;
    EXPECT_EQ(e.nbytes(), nt.tensor.nbytes()) << nt.name;
    EXPECT_EQ(e.begin % dtype_size(e.dtype), 0u) << nt.name << " is misaligned";
    Buffer back = Buffer::for_tensor(Device::cpu(), e.dtype, e.shape());
    const Tensor dst = back.tensor(e.dtype, e.shape());
    file.read(nt.name, dst);
    EXPECT_EQ(bytes_of(dst), bytes_of(nt.tensor)) << nt.name;
  }
  // The data section starts at a multiple of 8, like the reference writer's files.
  const std::vector<std::byte> raw = read_file(p);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= uint64_t(raw[i]) << (8 * i);
  EXPECT_EQ(header_bytes % 8, 0u);
}

TEST_F(SafetensorsTest, WritesTheReferenceLayoutByteForByte) {
  float weight[2] = {1.0f, -2.0f};
  uint8_t codes[3] = {0x38, 0x7e, 0x01};
  const std::string p = path("small.safetensors");
  save_safetensors(p,
                   {{"model.layers.0.self_attn.q_proj.weight", Tensor(codes, DType::e4m3, {3})},
                    {"model.norm.weight", Tensor(weight, DType::f32, {2})}},
                   {{"format", "pt"}});
  // Larger elements first; the header is padded with spaces to a multiple of 8.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"model.norm.weight":{"dtype":"F32","shape":[2],)"
      R"("data_offsets":[0,8]},"model.layers.0.self_attn.q_proj.weight":{"dtype":"F8_E4M3",)"
      R"("shape":[3],"data_offsets":[8,11]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string expected(8, '\0');
  for (int i = 0; i < 8; ++i) expected[i] = static_cast<char>(header.size() >> (8 * i));
  expected += header;
  expected.append(reinterpret_cast<const char*>(weight), sizeof weight);
  expected.append(reinterpret_cast<const char*>(codes), sizeof codes);
  EXPECT_EQ(read_text_file(p), expected);
}

TEST_F(SafetensorsTest, ReadChecksTheDestinationAndTheName) {
  float w[4] = {1, 2, 3, 4};
  const std::string p = path("m.safetensors");
  save_safetensors(p, {{"model.norm.weight", Tensor(w, DType::f32, {4})}});
  const SafetensorsFile file = SafetensorsFile::open(p);
  EXPECT_EQ(file.names(), std::vector<std::string>{"model.norm.weight"});
  EXPECT_TRUE(file.contains("model.norm.weight"));
  EXPECT_FALSE(file.contains("lm_head.weight"));
  float out[4] = {};
  EXPECT_EQ(error_of([&] { file.read("lm_head.weight", Tensor(out, DType::f32, {4})); }),
            "[safetensors] " + p +
                ": no tensor named 'lm_head.weight' (the file has 1 tensors: "
                "'model.norm.weight')");
  EXPECT_EQ(error_of([&] { file.read("model.norm.weight", Tensor(out, DType::bf16, {4})); }),
            "[safetensors] " + p +
                ": tensor 'model.norm.weight' is F32 [4] but the destination is bf16[4]@cpu; "
                "dtype and shape must match");
  EXPECT_THROW(file.read("model.norm.weight", Tensor(out, DType::f32, {2, 2})), Error);
  EXPECT_THROW(file.read("model.norm.weight", Tensor(out, DType::f32, {3})), Error);
  file.read("model.norm.weight", Tensor(out, DType::f32, {4}));
  EXPECT_EQ(std::memcmp(out, w, sizeof w), 0);
}

TEST_F(SafetensorsTest, AnOpenFileKeepsReadingTheVersionItOpened) {
  float v1[2] = {1, 2}, v2[2] = {5, 6}, out[2] = {};
  const std::string p = path("ckpt.safetensors");
  save_safetensors(p, {{"w", Tensor(v1, DType::f32, {2})}});
  SafetensorsFile file = SafetensorsFile::open(p);
  save_safetensors(p, {{"w", Tensor(v2, DType::f32, {2})}});  // a newer checkpoint lands
  SafetensorsFile moved = std::move(file);
  moved.read("w", Tensor(out, DType::f32, {2}));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  SafetensorsFile::open(p).read("w", Tensor(out, DType::f32, {2}));
  EXPECT_EQ(out[0], 5.0f);
}

TEST_F(SafetensorsTest, AFailedSaveLeavesTheLastGoodFileUntouched) {
  float w[2] = {1, 2};
  const std::string p = path("model.safetensors");
  save_safetensors(p, {{"w", Tensor(w, DType::f32, {2})}});
  const std::vector<std::byte> good = read_file(p);
  EXPECT_NE(
      error_of([&] {
        save_safetensors(p, {{"a", Tensor(w, DType::f32, {2})}, {"a", Tensor(w, DType::f32, {1})}});
      }).find("tensor name 'a' appears twice"),
      std::string::npos);
  EXPECT_THROW(save_safetensors(p, {{"", Tensor(w, DType::f32, {2})}}), Error);
  EXPECT_THROW(save_safetensors(p, {{"__metadata__", Tensor(w, DType::f32, {2})}}), Error);
  EXPECT_THROW(save_safetensors(p, {{"x", Tensor(nullptr, DType::f32, {2})}}), Error);
  EXPECT_EQ(read_file(p), good);
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp_.path()), fs::directory_iterator()), 1);
}

// Each malformed file is rejected with a message naming the file and what is wrong with it.
TEST_F(SafetensorsTest, OpenRejectsMalformedFiles) {
  const std::string f32_4 = R"("dtype":"F32","shape":[4])";
  struct Case {
    std::string header;
    size_t data_bytes;
    int64_t length;  // -1: the header's true length
    std::string expected;
  };
  const std::vector<Case> cases = {
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[0,16]}})", 16, 1000,
       "header length 1000 exceeds the 71 bytes after the length field; the file is truncated"},
      {"{}", 0, 200'000'000, "header length 200000000 exceeds the limit of 100000000 bytes"},
      {R"({"a":{"dtype":"F32",}})", 0, -1,
       "the header is not valid JSON: header:1:21: syntax error while parsing object key - "
       "unexpected '}'"},
      {"[]", 0, -1, "the header is a JSON array, not an object"},
      {R"({"a":{"dtype":"F64","shape":[4],"data_offsets":[0,32]}})", 32, -1,
       "tensor 'a': unsupported dtype 'F64'; octet reads F32, BF16"},
      {R"({"model.norm.weight":{"dtype":"F32","shape":[64],"data_offsets":[0,100]}})", 100, -1,
       "tensor 'model.norm.weight': data_offsets [0, 100] do not match shape [64] of F32 "
       "(256 bytes)"},
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[0,16]},"b":{)" + f32_4 +
           R"(,"data_offsets":[8,24]}})",
       24, -1, "tensors 'a' [0, 16] and 'b' [8, 24] overlap"},
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[0,16]},"b":{)" + f32_4 +
           R"(,"data_offsets":[20,36]}})",
       36, -1, "bytes [16, 20] of the data section belong to no tensor (before tensor 'b')"},
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[0,16]}})", 24, -1,
       "the data section has 24 bytes but its tensors end at byte 16"},
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[0,16]}})", 10, -1,
       "tensor 'a': data_offsets [0, 16] extend beyond the data section (10 bytes)"},
      {R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})", 4, -1,
       "tensor 'a': shape must be an array of non-negative integers, got [2.5]"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, -1,
       "tensor 'a': shape must be an array of non-negative integers, got [-1]"},
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[16,0]}})", 16, -1,
       "tensor 'a': data_offsets must be [begin, end] with 0 <= begin <= end, got [16,0]"},
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[0]}})", 16, -1,
       "tensor 'a': data_offsets must be [begin, end]"},
      {R"({"a":{)" + f32_4 + R"(}})", 16, -1, "tensor 'a': missing field 'data_offsets'"},
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[0,16],"offset":0}})", 16, -1,
       "tensor 'a': unknown field 'offset'"},
      {R"({"a":{"dtype":7,"shape":[4],"data_offsets":[0,16]}})", 16, -1,
       "tensor 'a': field 'dtype' must be a string, got 7 (number)"},
      {R"({"a":[]})", 0, -1, "tensor 'a': expected an object with dtype, shape and data_offsets"},
      {R"({"a":{)" + f32_4 + R"(,"data_offsets":[0,16]},"a":{)" + f32_4 +
           R"(,"data_offsets":[0,16]}})",
       16, -1, "duplicate key \"a\""},
      {R"({"__metadata__":{"step":3}})", 0, -1, "__metadata__ field 'step' must be a string"},
      {R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,2],"data_offsets":[0,1]}})", 1, -1,
       "tensor 'a': shape [4294967296,4294967296,2] is too large"},
  };
  for (const Case& c : cases) {
    const std::string p = raw_file(c.header, c.data_bytes, c.length);
    const std::string message = error_of([&] { SafetensorsFile::open(p); });
    const std::string prefix = "[safetensors] " + p + ": ";
    EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << "header: " << c.header << "\nmessage: " << message << "\nexpected: " << c.expected;
  }
}

TEST_F(SafetensorsTest, OpenRejectsTruncatedAndMissingFiles) {
  const std::string p = path("short.safetensors");
  write_file_atomic(p, std::string_view("\x10\x00\x00", 3));
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(p); }),
            "[safetensors] " + p +
                ": the file has 3 bytes, fewer than the 8-byte header length; not a safetensors "
                "file");
  // A good file cut anywhere in its data is rejected at open(), before any read.
  float w[16] = {};
  const std::string good = path("good.safetensors");
  save_safetensors(good, {{"w", Tensor(w, DType::f32, {16})}});
  fs::resize_file(good, fs::file_size(good) - 1);
  EXPECT_NE(error_of([&] { SafetensorsFile::open(good); }).find("extend beyond the data section"),
            std::string::npos);
  const std::string missing = path("missing.safetensors");
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(missing); }),
            "[safetensors] " + missing + ": cannot open: No such file or directory");
}

TEST_F(SafetensorsTest, AcceptsAnEmptyFileAndRanksAboveFourAreReportedOnUse) {
  const std::string p = raw_file(R"({"a":{"dtype":"U8","shape":[1,1,1,1,2],)"
                                 R"("data_offsets":[0,2]}}   )",
                                 2);
  const SafetensorsFile file = SafetensorsFile::open(p);
  EXPECT_EQ(file.info("a").shape_str(), "[1, 1, 1, 1, 2]");
  EXPECT_THROW(file.info("a").shape(), Error);
  uint8_t out[2];
  EXPECT_THROW(file.read("a", Tensor(out, DType::u8, {2})), Error);

  const std::string empty = path("empty.safetensors");
  save_safetensors(empty, {});
  EXPECT_TRUE(SafetensorsFile::open(empty).names().empty());
  EXPECT_EQ(fs::file_size(empty), 16u);  // length + "{}" padded to 8
}

// Device tensors go through the host staging buffer in chunks, both ways. (Suites named
// Cuda* are the GPU tests; they skip themselves without a GPU.)
class CudaSafetensorsTest : public SafetensorsTest {};

TEST_F(CudaSafetensorsTest, RoundTripsDeviceTensorsLargerThanTheStagingBuffer) {
  OCTET_SKIP_WITHOUT(Device::cuda(0));
  testing::Rng rng(testing::fresh_seed());
  const Shape shape{3, (int64_t{9} << 20) / 3 / 2 + 1};  // > the 8 MiB staging buffer in bf16
  std::vector<uint16_t> host(static_cast<size_t>(shape.numel()));
  for (uint16_t& v : host) v = static_cast<uint16_t>(rng());
  Buffer device = Buffer::for_tensor(Device::cuda(0), DType::bf16, shape);
  copy_bytes(device.data(), Device::cuda(0), host.data(), Device::cpu(), host.size() * 2);
  const std::string p = path("device.safetensors");
  save_safetensors(p, {{"model.embed_tokens.weight", device.tensor(DType::bf16, shape)}});

  const SafetensorsFile file = SafetensorsFile::open(p);
  Buffer back = Buffer::for_tensor(Device::cuda(0), DType::bf16, shape);
  file.read("model.embed_tokens.weight", back.tensor(DType::bf16, shape));
  std::vector<uint16_t> out(host.size());
  copy_bytes(out.data(), Device::cpu(), back.data(), Device::cuda(0), out.size() * 2);
  EXPECT_EQ(out, host);
  std::vector<uint16_t> on_disk(host.size());
  file.read("model.embed_tokens.weight", Tensor(on_disk.data(), DType::bf16, shape));
  EXPECT_EQ(on_disk, host);
}

}  // namespace
}  // namespace octet
