// data/synthetic.cpp: the sparse Markov source: drawing the chain, checking it is
// ergodic, solving for its stationary distribution and generating streams.
#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "data/random.h"

namespace octet::data {
namespace {

constexpr uint64_t kOne53 = uint64_t{1} << 53;  // the probability grid: p = cut spacing / 2^53
constexpr double kInv53 = 0x1p-53;
constexpr int64_t kMaxContexts = int64_t{1} << 20;
constexpr int kMaxDraws = 100;
constexpr double kStationaryTolL1 = 1e-13;
constexpr int kMaxIterations = 100000;
constexpr uint64_t kChainStream = 0x436861696E000000ull;  // "Chain": seeds of the draws
constexpr uint64_t kTokenStream = 0x546F6B656E000000ull;  // "Token": seeds of the streams

// Neumaier's compensated sum: the entropy rate is a sum of up to 2^20 terms.
struct CompensatedSum {
  double sum = 0, carry = 0;
  void add(double x) {
    const double t = sum + x;
    carry += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
    sum = t;
  }
  double value() const { return sum + carry; }
};

double entropy_of(std::span<const double> p) {
  CompensatedSum h;
  for (double q : p)
    if (q > 0) h.add(-q * std::log(q));
  return h.value();
}

}  // namespace

std::string MarkovConfig::str() const {
  std::ostringstream os;
  os << "markov(vocab=" << vocab << ", order=" << order << ", support=" << support_min << ".."
     << support_max << ", seed=" << seed << ")";
  return os.str();
}

MarkovSource::MarkovSource(const MarkovConfig& config) : config_(config) {
  const std::string c = config.str();
  OCTET_CHECK(config.vocab >= 2, "synthetic", c, ": vocab must be at least 2");
  OCTET_CHECK(config.order >= 1 && config.order <= 4, "synthetic", c, ": order must be 1..4");
  OCTET_CHECK(config.support_min >= 1 && config.support_min <= config.support_max &&
                  config.support_max <= config.vocab,
              "synthetic", c, ": need 1 <= support_min <= support_max <= vocab");
  num_contexts_ = 1;
  for (int i = 0; i < config.order; ++i) {
    num_contexts_ *= config.vocab;
    OCTET_CHECK(num_contexts_ <= kMaxContexts, "synthetic", c, ": vocab^order is more than ",
                kMaxContexts, " contexts; lower the vocabulary or the order");
  }

  std::vector<uint8_t> in_class;
  for (draws_ = 1; draws_ <= kMaxDraws; ++draws_) {
    draw_chain(derive_seed(config.seed, kChainStream + static_cast<uint64_t>(draws_ - 1)));
    if (find_closed_class(in_class)) break;
  }
  OCTET_CHECK(draws_ <= kMaxDraws, "synthetic", c, ": no ergodic chain in ", kMaxDraws,
              " draws; raise support_min (small supports make closed or periodic cycles)");
  solve_stationary(in_class);
}

// Draws every context's support (a uniform random subset, by a partial Fisher-Yates
// shuffle that is undone afterwards) and its Dirichlet(1) probabilities (cut spacings).
void MarkovSource::draw_chain(uint64_t draw_seed) {
  Rng rng(draw_seed);
  const int vocab = config_.vocab;
  const uint64_t sizes = static_cast<uint64_t>(config_.support_max - config_.support_min + 1);
  offsets_.assign(1, 0);
  tokens_.clear();
  cuts_.clear();
  probs_.clear();
  std::vector<int32_t> perm(static_cast<size_t>(vocab));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<size_t> swaps;
  std::vector<int32_t> support;
  std::vector<uint64_t> cuts;
  for (int64_t ctx = 0; ctx < num_contexts_; ++ctx) {
    const int s = config_.support_min + static_cast<int>(uniform_below(rng, sizes));
    swaps.clear();
    for (int i = 0; i < s; ++i) {
      const size_t j =
          static_cast<size_t>(i) + uniform_below(rng, static_cast<uint64_t>(vocab - i));
      std::swap(perm[static_cast<size_t>(i)], perm[j]);
      swaps.push_back(j);
    }
    support.assign(perm.begin(), perm.begin() + s);
    for (int i = s - 1; i >= 0; --i)
      std::swap(perm[static_cast<size_t>(i)], perm[swaps[static_cast<size_t>(i)]]);
    std::sort(support.begin(), support.end());

    // s-1 distinct cut points in [1, 2^53), so every probability is positive; a draw
    // with a repeat or a zero (chance about s^2 / 2^54) is drawn again.
    for (;;) {
      cuts.clear();
      for (int i = 1; i < s; ++i) cuts.push_back(uniform_53bit(rng));
      std::sort(cuts.begin(), cuts.end());
      if ((cuts.empty() || cuts.front() != 0) &&
          std::adjacent_find(cuts.begin(), cuts.end()) == cuts.end())
        break;
    }
    cuts.push_back(kOne53);
    uint64_t prev = 0;
    for (int i = 0; i < s; ++i) {
      tokens_.push_back(support[static_cast<size_t>(i)]);
      cuts_.push_back(cuts[static_cast<size_t>(i)]);
      probs_.push_back(static_cast<double>(cuts[static_cast<size_t>(i)] - prev) * kInv53);
      prev = cuts[static_cast<size_t>(i)];
    }
    offsets_.push_back(static_cast<int64_t>(tokens_.size()));
  }
}

// True when the context graph has exactly one closed class, aperiodic and holding at least
// half of the contexts; marks its members in `in_class`. A closed class is found by walking into
// ever smaller forward closures: the forward closure F(x) of x is x's class exactly when every node
// of F(x) reaches x; otherwise any y in F(x) that does not reach x has F(y) strictly inside F(x).
// The class is unique when every context reaches one of its members.
bool MarkovSource::find_closed_class(std::vector<uint8_t>& in_class) const {
  const auto n = static_cast<size_t>(num_contexts_);
  const auto at = [](int64_t i) { return static_cast<size_t>(i); };
  // Edge e of context c leads to successor(c, e).
  const auto successor = [&](int64_t c, int64_t e) { return next_context(c, tokens_[at(e)]); };
  const auto edges = [&](int64_t c) { return std::pair(offsets_[at(c)], offsets_[at(c) + 1]); };

  // The reverse graph in CSR form.
  std::vector<int64_t> rev_offsets(n + 1, 0);
  for (int64_t c = 0; c < num_contexts_; ++c)
    for (auto [e, end] = edges(c); e < end; ++e) ++rev_offsets[at(successor(c, e)) + 1];
  std::partial_sum(rev_offsets.begin(), rev_offsets.end(), rev_offsets.begin());
  std::vector<int64_t> rev(at(rev_offsets[n]));
  {
    std::vector<int64_t> fill(rev_offsets.begin(), rev_offsets.end() - 1);
    for (int64_t c = 0; c < num_contexts_; ++c)
      for (auto [e, end] = edges(c); e < end; ++e) rev[at(fill[at(successor(c, e))]++)] = c;
  }

  std::vector<int64_t> level(n), queue;
  std::vector<uint8_t> reaches(n);
  // Breadth-first search from `root`: forward (the levels of F(root), in `queue`) or
  // backward (marks in `reaches` what can reach root).
  auto forward = [&](int64_t root) {
    std::fill(level.begin(), level.end(), -1);
    queue.assign(1, root);
    level[at(root)] = 0;
    for (size_t q = 0; q < queue.size(); ++q) {
      const int64_t c = queue[q];
      for (auto [e, end] = edges(c); e < end; ++e) {
        const int64_t d = successor(c, e);
        if (level[at(d)] < 0) {
          level[at(d)] = level[at(c)] + 1;
          queue.push_back(d);
        }
      }
    }
  };
  auto backward = [&](int64_t root) {
    std::fill(reaches.begin(), reaches.end(), 0);
    std::vector<int64_t> todo(1, root);
    reaches[at(root)] = 1;
    while (!todo.empty()) {
      const int64_t c = todo.back();
      todo.pop_back();
      for (int64_t e = rev_offsets[at(c)]; e < rev_offsets[at(c) + 1]; ++e) {
        const int64_t d = rev[at(e)];
        if (!reaches[at(d)]) {
          reaches[at(d)] = 1;
          todo.push_back(d);
        }
      }
    }
  };

  int64_t root = 0;
  for (;;) {
    forward(root);
    backward(root);
    const auto escapee =
        std::find_if(queue.begin(), queue.end(), [&](int64_t c) { return !reaches[at(c)]; });
    if (escapee == queue.end()) break;
    root = *escapee;
  }
  // `queue` is root's class and it is closed; `reaches` marks everything that can enter it.
  if (std::find(reaches.begin(), reaches.end(), 0) != reaches.end()) return false;
  // A small trap (with support 1: a token that always follows itself) would be a valid
  // chain but a degenerate corpus: keep classes that hold at least half of the contexts.
  if (2 * queue.size() < n) return false;

  // Period: gcd over the class's edges of level(u) + 1 - level(v).
  int64_t period = 0;
  for (int64_t c : queue)
    for (auto [e, end] = edges(c); e < end; ++e)
      period = std::gcd(period, level[at(c)] + 1 - level[at(successor(c, e))]);
  if (period != 1) return false;
  in_class.assign(n, 0);
  for (int64_t c : queue) in_class[at(c)] = 1;
  return true;
}

void MarkovSource::solve_stationary(const std::vector<uint8_t>& in_class) {
  const auto n = static_cast<size_t>(num_contexts_);
  entropy_.resize(n);
  for (size_t c = 0; c < n; ++c) entropy_[c] = entropy_of(next_probs(static_cast<int64_t>(c)));

  recurrent_contexts_ = std::count(in_class.begin(), in_class.end(), uint8_t{1});
  std::vector<double> pi(n, 0.0), next(n);
  for (size_t c = 0; c < n; ++c)
    if (in_class[c]) pi[c] = 1.0 / static_cast<double>(recurrent_contexts_);
  int iteration = 0;
  for (;; ++iteration) {
    OCTET_CHECK(iteration < kMaxIterations, "synthetic", config_.str(),
                ": the stationary distribution did not converge in ", kMaxIterations,
                " iterations");
    std::fill(next.begin(), next.end(), 0.0);
    for (size_t c = 0; c < n; ++c) {
      if (pi[c] == 0) continue;
      const auto toks = next_tokens(static_cast<int64_t>(c));
      const auto probs = next_probs(static_cast<int64_t>(c));
      for (size_t i = 0; i < toks.size(); ++i)
        next[static_cast<size_t>(next_context(static_cast<int64_t>(c), toks[i]))] +=
            pi[c] * probs[i];
    }
    CompensatedSum total;
    for (double x : next) total.add(x);
    double change = 0;
    for (size_t c = 0; c < n; ++c) {
      next[c] /= total.value();
      change += std::fabs(next[c] - pi[c]);
    }
    pi.swap(next);
    if (change < kStationaryTolL1) break;
  }
  stationary_ = std::move(pi);

  CompensatedSum rate;
  for (size_t c = 0; c < n; ++c) rate.add(stationary_[c] * entropy_[c]);
  entropy_rate_ = rate.value();

  // Entropy of the first j tokens of a context under pi, j = 1..order.
  prefix_entropy_.assign(static_cast<size_t>(config_.order) + 1, 0.0);
  int64_t divisor = num_contexts_;
  for (int j = 1; j <= config_.order; ++j) {
    divisor /= config_.vocab;
    std::vector<double> marginal(static_cast<size_t>(num_contexts_ / divisor), 0.0);
    for (size_t c = 0; c < n; ++c) marginal[c / static_cast<size_t>(divisor)] += stationary_[c];
    prefix_entropy_[static_cast<size_t>(j)] = entropy_of(marginal);
  }
}

std::span<const int32_t> MarkovSource::next_tokens(int64_t context) const {
  const auto c = static_cast<size_t>(context);
  return {tokens_.data() + offsets_[c], static_cast<size_t>(offsets_[c + 1] - offsets_[c])};
}

std::span<const double> MarkovSource::next_probs(int64_t context) const {
  const auto c = static_cast<size_t>(context);
  return {probs_.data() + offsets_[c], static_cast<size_t>(offsets_[c + 1] - offsets_[c])};
}

double MarkovSource::probability(int64_t context, int32_t token) const {
  const auto toks = next_tokens(context);
  const auto it = std::lower_bound(toks.begin(), toks.end(), token);
  if (it == toks.end() || *it != token) return 0.0;
  return next_probs(context)[static_cast<size_t>(it - toks.begin())];
}

double MarkovSource::loss_floor_nats(int64_t seq_len) const {
  OCTET_CHECK(seq_len >= 1, "synthetic", "loss_floor_nats: seq_len must be positive, got ",
              seq_len);
  const int64_t k = config_.order;
  // H(x_0..x_S): a prefix of one context, or a whole context then entropy_rate per token.
  const double joint = seq_len + 1 <= k ? prefix_entropy_[static_cast<size_t>(seq_len + 1)]
                                        : prefix_entropy_[static_cast<size_t>(k)] +
                                              static_cast<double>(seq_len + 1 - k) * entropy_rate_;
  return (joint - prefix_entropy_[1]) / static_cast<double>(seq_len);
}

void MarkovSource::generate(std::span<int32_t> out, uint64_t stream) const {
  Rng rng(derive_seed(config_.seed, kTokenStream + stream));
  // The start context from pi: the first context whose cumulative mass exceeds u.
  const double u = static_cast<double>(uniform_53bit(rng)) * kInv53;
  int64_t ctx = -1;
  double cumulative = 0;
  for (int64_t c = 0; c < num_contexts_; ++c) {
    if (stationary_[static_cast<size_t>(c)] == 0) continue;
    ctx = c;  // the last recurrent context absorbs rounding at the top end
    cumulative += stationary_[static_cast<size_t>(c)];
    if (u < cumulative) break;
  }
  const auto k = static_cast<size_t>(config_.order);
  int64_t digits = ctx;
  for (size_t i = k; i-- > 0;) {
    if (i < out.size()) out[i] = static_cast<int32_t>(digits % config_.vocab);
    digits /= config_.vocab;
  }
  for (size_t i = k; i < out.size(); ++i) {
    const uint64_t w = uniform_53bit(rng);
    const auto c = static_cast<size_t>(ctx);
    // The first entry whose upper cut is above w; the last cut is 2^53 > w.
    const auto e =
        std::upper_bound(cuts_.begin() + offsets_[c], cuts_.begin() + offsets_[c + 1], w) -
        cuts_.begin();
    out[i] = tokens_[static_cast<size_t>(e)];
    ctx = next_context(ctx, out[i]);
  }
}

std::vector<int32_t> MarkovSource::generate(int64_t count, uint64_t stream) const {
  OCTET_CHECK(count >= 0, "synthetic", "generate: count must be non-negative, got ", count);
  std::vector<int32_t> out(static_cast<size_t>(count));
  generate(out, stream);
  return out;
}

SyntheticSplit synthetic_split(const MarkovSource& source, int64_t train_tokens,
                               int64_t val_tokens) {
  return {source.generate(train_tokens, 0), source.generate(val_tokens, 1)};
}

}  // namespace octet::data
