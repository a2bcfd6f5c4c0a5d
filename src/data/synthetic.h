// data/synthetic.h: a built-in corpus whose entropy rate is known exactly: tokens from
// a random sparse Markov source, so a test can say how close to the floor a model got.
// defines: MarkovConfig, MarkovSource, SyntheticSplit, synthetic_split
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace octet::data {

// The source is an order-k Markov chain over `vocab` tokens. Its state (the context) is
// the last k tokens. Each context may be followed by a small random set of tokens (the
// support, `support_min`..`support_max` of them, uniform in size and in membership) with
// Dirichlet(1, ..., 1) probabilities. Everything is drawn from integer RNG words only:
//   - probabilities are the spacings of s-1 sorted distinct uniform 53-bit cut points,
//     p_i = (cut_i - cut_{i-1}) / 2^53, which is exactly Dirichlet(1) up to the 2^-53 grid
//     and makes every p_i an exact double; sampling compares one 53-bit word with the
//     cut points, so the sampler realizes exactly the p_i the entropy is computed from.
//   - a draw is kept only when the chain has exactly one closed class of contexts, that
//     class is aperiodic and it holds at least half of the contexts (other contexts are
//     transient; the last condition rules out small traps such as a token that always
//     follows itself); otherwise the next derived seed is drawn. Then the stationary distribution
//     pi is unique, every generated stream is ergodic, and the entropy rate H = sum_c pi(c) H(next
//     | c) is what a long stream's -mean log p converges to.
// The defaults (vocab 128, order 1, support 2..8) give a rate near 1.2 nats/token (seed 0:
// 1.1871), far below the unigram entropy (~4.5 nats): learnable by a tiny transformer in
// seconds. The token streams use integers and IEEE +,*,/ only (pi picks the start
// context), so they are the same bits everywhere; the entropies go through std::log.
struct MarkovConfig {
  int vocab = 128;      // tokens 0..vocab-1; vocab >= 2
  int order = 1;        // k: how many previous tokens the next one depends on (1..4)
  int support_min = 2;  // fewest possible next tokens per context (>= 1)
  int support_max = 8;  // most possible next tokens per context (<= vocab)
  uint64_t seed = 0;    // the chain; streams derive their own seeds from it

  std::string str() const;  // "markov(vocab=128, order=1, support=2..8, seed=0)"
};

class MarkovSource {
 public:
  // Draws the chain and solves for its stationary distribution (power iteration until the
  // L1 change is below 1e-13). Throws octet::Error on an invalid config or when no
  // ergodic chain is found in 100 draws (support_min = 1 can do that).
  explicit MarkovSource(const MarkovConfig& config);

  const MarkovConfig& config() const { return config_; }
  // vocab^order. A context is the base-vocab number of its tokens, oldest first.
  int64_t num_contexts() const { return num_contexts_; }
  int64_t next_context(int64_t context, int32_t token) const {
    return (context * config_.vocab + token) % num_contexts_;
  }

  // The support of `context` in increasing token order, and its probabilities.
  std::span<const int32_t> next_tokens(int64_t context) const;
  std::span<const double> next_probs(int64_t context) const;
  // p(token | context); 0 when the token is not in the context's support.
  double probability(int64_t context, int32_t token) const;
  // H(next | context) in nats.
  double context_entropy_nats(int64_t context) const { return entropy_[context]; }

  // The stationary distribution over contexts (sums to 1; zero on transient contexts).
  const std::vector<double>& stationary() const { return stationary_; }
  // sum_c pi(c) H(next | c): the best mean loss, in nats per token, of any predictor
  // that sees the whole past.
  double entropy_rate_nats() const { return entropy_rate_; }
  // Entropy of one token under pi: the best loss of a predictor that sees no context.
  double unigram_entropy_nats() const { return prefix_entropy_[1]; }
  // The best mean loss over the `seq_len` targets of one training window (inputs x_0..x_{S-1},
  // targets x_1..x_S, window drawn from the stationary stream): (H(x_0..x_S) - H(x_0)) / S.
  // Above the entropy rate for order > 1 (the first targets lack full context); equal to
  // it for order 1.
  double loss_floor_nats(int64_t seq_len) const;
  // How many draws it took to find an ergodic chain (1 almost always).
  int draws() const { return draws_; }
  // Contexts in the closed class (those with pi > 0).
  int64_t recurrent_contexts() const { return recurrent_contexts_; }

  // Fills `out` with a stationary stream: its first `order` tokens are a context drawn
  // from pi, each later token is drawn given the previous `order`. Deterministic in
  // (config, stream): stream 0 and 1 are what synthetic_split uses for train and val.
  void generate(std::span<int32_t> out, uint64_t stream) const;
  std::vector<int32_t> generate(int64_t count, uint64_t stream) const;

 private:
  void draw_chain(uint64_t draw_seed);
  bool find_closed_class(std::vector<uint8_t>& in_class) const;
  void solve_stationary(const std::vector<uint8_t>& in_class);

  MarkovConfig config_;
  int64_t num_contexts_ = 0;
  std::vector<int64_t> offsets_;  // context c's support is [offsets_[c], offsets_[c+1])
  std::vector<int32_t> tokens_;
  std::vector<uint64_t> cuts_;  // upper cut point of each support entry, last one 2^53
  std::vector<double> probs_;
  std::vector<double> entropy_;
  std::vector<double> stationary_;
  std::vector<double> prefix_entropy_;  // [j]: entropy of the first j tokens of a context
  double entropy_rate_ = 0;
  int draws_ = 0;
  int64_t recurrent_contexts_ = 0;
};

// A train and a validation stream from the same source with different derived seeds
// (streams 0 and 1), so validation measures generalization to unseen sequences.
struct SyntheticSplit {
  std::vector<int32_t> train;
  std::vector<int32_t> val;
};
SyntheticSplit synthetic_split(const MarkovSource& source, int64_t train_tokens,
                               int64_t val_tokens);

}  // namespace octet::data
