// kernels/cpu/transpose_cpu.cpp: cache-blocked 2-D transpose on the CPU, one
// 64 x 64 tile at a time through an L1-resident buffer; OpenMP runs over tiles.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/backends.h"
#include "kernels/cpu/byte_transpose.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include "kernels/cpu/byte_transpose_avx2.h"
#include "kernels/cpu/byte_transpose_avx512.h"
#endif
#include "kernels/cpu/isa.h"

namespace octet::kernels::cpu {
namespace {

// 64 x 64 elements: a 16 KiB tile buffer at 4 bytes, well inside L1.
constexpr int64_t kTile = 64;
// Below this many elements one thread is faster than waking a team.
constexpr int64_t kParallelElements = int64_t{1} << 16;

// dst[c, r] = src[r, c] over the tile at (r0, c0), through a contiguous copy of
// the tile: with power-of-two strides (4096 columns, say) the rows of a tile in
// src or dst all map to the same L1 sets and evict one another, while the copy
// is read and written with unit stride on one side and L1-resident on the other.
template <typename T>
void transpose_tile(const T* __restrict src, T* __restrict dst, int64_t rows, int64_t cols,
                    int64_t r0, int64_t c0) {
  const int64_t h = std::min(kTile, rows - r0), w = std::min(kTile, cols - c0);
  alignas(64) T tile[kTile * kTile];
  for (int64_t r = 0; r < h; ++r) {
    const T* __restrict in = src + (r0 + r) * cols + c0;
    for (int64_t c = 0; c < w; ++c) tile[c * kTile + r] = in[c];
  }
  for (int64_t c = 0; c < w; ++c) {
    T* __restrict out = dst + (c0 + c) * rows + r0;
    const T* __restrict in = tile + c * kTile;
    for (int64_t r = 0; r < h; ++r) out[r] = in[r];
  }
}

// The same for bytes (FP8 data, the transposed copies of quantize): a full tile in 8 x 8
// blocks transposed in registers (kernels/cpu/byte_transpose.h) where the loops above move
// one byte at a time.
template <>
void transpose_tile<uint8_t>(const uint8_t* __restrict src, uint8_t* __restrict dst, int64_t rows,
                             int64_t cols, int64_t r0, int64_t c0) {
  const int64_t h = std::min(kTile, rows - r0), w = std::min(kTile, cols - c0);
  alignas(64) uint8_t tile[kTile * kTile];
  if (h < kTile || w < kTile) {
    for (int64_t r = 0; r < h; ++r) {
      const uint8_t* __restrict in = src + (r0 + r) * cols + c0;
      for (int64_t c = 0; c < w; ++c) tile[c * kTile + r] = in[c];
    }
  } else {
    alignas(64) uint8_t copy[kTile * kTile];
    for (int64_t r = 0; r < kTile; ++r)
      std::memcpy(copy + r * kTile, src + (r0 + r) * cols + c0, kTile);
    for (int64_t rb = 0; rb < kTile; rb += 8) {
      for (int64_t cb = 0; cb < kTile; cb += 8) {
        transpose8x8(copy + rb * kTile + cb, kTile, tile + cb * kTile + rb, kTile);
      }
    }
  }
  for (int64_t c = 0; c < w; ++c) std::memcpy(dst + (c0 + c) * rows + r0, tile + c * kTile, h);
}

// tile(r0, c0) for every kTile x kTile tile of a [rows, cols] source, in parallel. Column
// tiles outermost: each thread writes one contiguous block of dst rows.
template <class Tile>
void for_each_tile(int64_t rows, int64_t cols, Tile tile) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols > kParallelElements)
  for (int64_t tc = 0; tc < col_tiles; ++tc) {
    for (int64_t tr = 0; tr < row_tiles; ++tr) tile(tr * kTile, tc * kTile);
  }
}

template <typename T>
void transpose_typed(const void* src, void* dst, int64_t rows, int64_t cols) {
  const auto* s = static_cast<const T*>(src);
  auto* d = static_cast<T*>(dst);
  for_each_tile(rows, cols,
                [&](int64_t r0, int64_t c0) { transpose_tile(s, d, rows, cols, r0, c0); });
}

#if defined(__x86_64__) && defined(__GNUC__)
// Bytes where AVX2 or AVX-512 is usable: each tile by 16 x 16 unpack rounds in registers
// (kernels/cpu/byte_transpose_avx2.h, byte_transpose_avx512.h).
template <Isa kIsa>
void transpose_u8_vector(const void* src, void* dst, int64_t rows, int64_t cols) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for_each_tile(rows, cols, [&](int64_t r0, int64_t c0) {
    const int64_t h = std::min(kTile, rows - r0), w = std::min(kTile, cols - c0);
    if constexpr (kIsa == Isa::avx512) {
      avx512::transpose_tile64(s + r0 * cols + c0, cols, h, w, d + c0 * rows + r0, rows);
    } else {
      avx2::transpose_tile64(s + r0 * cols + c0, cols, h, w, d + c0 * rows + r0, rows);
    }
  });
}
#endif

// Element sizes without a typed path (none today): one memcpy per element.
void transpose_bytes(const void* src, void* dst, int64_t rows, int64_t cols, size_t size) {
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(d + (c * rows + r) * static_cast<int64_t>(size),
                  s + (r * cols + c) * static_cast<int64_t>(size), size);
    }
  }
}

}  // namespace

void transpose(const Tensor& src, const Tensor& dst) {
  const int64_t rows = src.rows(), cols = src.cols();
  switch (dtype_size(src.dtype)) {
    case 1:
#if defined(__x86_64__) && defined(__GNUC__)
      if (const Isa isa = usable_isa("transpose"); isa == Isa::avx512) {
        return transpose_u8_vector<Isa::avx512>(src.data, dst.data, rows, cols);
      } else if (isa == Isa::avx2) {
        return transpose_u8_vector<Isa::avx2>(src.data, dst.data, rows, cols);
      }
#endif
      return transpose_typed<uint8_t>(src.data, dst.data, rows, cols);
    case 2:
      return transpose_typed<uint16_t>(src.data, dst.data, rows, cols);
    case 4:
      return transpose_typed<uint32_t>(src.data, dst.data, rows, cols);
    default:
      return transpose_bytes(src.data, dst.data, rows, cols, dtype_size(src.dtype));
  }
}

}  // namespace octet::kernels::cpu
