// data/random.h: integer-only random helpers for data/, so that corpora and
// shuffles are the same bits with every standard library (std::*_distribution differ).
// defines: data::Rng, splitmix64, derive_seed, uniform_below, uniform_53bit, shuffle_in_place
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace octet::data {

// std::mt19937_64's output sequence is fixed by the C++ standard; its distributions are not,
// so data/ only ever uses the raw 64-bit words.
using Rng = std::mt19937_64;

// One step of SplitMix64 (Steele, Lea, Flood 2014): a bijective mixer of 64-bit words.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// An independent-looking seed for sub-stream `stream` of `seed` (e.g. train = 0, val = 1).
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  return splitmix64(splitmix64(seed) ^ splitmix64(stream + 0x632BE59BD9B4E019ull));
}

// Uniform integer in [0, n), n > 0, exactly unbiased: words in the short top range are
// rejected (at most one in two draws, on average far fewer).
inline uint64_t uniform_below(Rng& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

// Uniform integer in [0, 2^53): the top 53 bits of one word.
inline uint64_t uniform_53bit(Rng& rng) {
  return rng() >> 11;
}

// Fisher-Yates shuffle: every permutation equally likely (given a uniform generator).
template <typename T>
void shuffle_in_place(std::span<T> items, Rng& rng) {
  for (size_t i = items.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(uniform_below(rng, i));
    const T t = items[i - 1];
    items[i - 1] = items[j];
    items[j] = t;
  }
}

}  // namespace octet::data
