// cli/tokenize.cpp: `octet tokenize`: train a SentencePiece tokenizer on text files, or
// encode text files into token shards with one.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/error.h"
#include "data/tokenizer.h"

namespace octet::cli {
namespace {

int train(const Args& a, const std::vector<std::string>& inputs) {
  data::TokenizerTrainOptions o;
  o.inputs = inputs;
  OCTET_CHECK(a.has("model-prefix"), "tokenize",
              "--train needs --model-prefix (writes PREFIX.model)");
  o.model_prefix = a.get("model-prefix", "");
  o.vocab_size = static_cast<int>(a.get_int("vocab-size", 8000));
  o.model_type = a.get("model-type", "bpe");
  o.character_coverage = a.get_double("character-coverage", 1.0);
  o.byte_fallback = a.has("byte-fallback");
  o.input_sentence_size = a.get_int("max-lines", 0);
  o.threads = static_cast<int>(a.get_int("threads", 0));
  o.quiet = !a.has("verbose");
  data::tokenizer_train(o);
  const auto tok = data::Tokenizer::load(o.model_prefix + ".model");
  std::printf("tokenize: wrote %s.model and %s.vocab (%d pieces, %s)\n", o.model_prefix.c_str(),
              o.model_prefix.c_str(), tok.vocab_size(), o.model_type.c_str());
  return 0;
}

int encode(const Args& a, const std::vector<std::string>& inputs) {
  OCTET_CHECK(a.has("output"), "tokenize", "encoding needs --output DIR for the shards");
  const auto tok = data::Tokenizer::load(a.get("model", ""));
  data::TextShardOptions o;
  o.inputs = inputs;
  o.output_dir = a.get("output", "");
  o.shard_tokens = a.get_int("shard-tokens", o.shard_tokens);
  o.split = data::document_split_from_name(a.get("split", "blank"));
  o.val_tokens = a.get_int("val-tokens", 0);
  const auto s = data::tokenize_files_to_shards(tok, o);
  std::printf("tokenize: %lld documents -> %lld train tokens in %zu shard(s)",
              static_cast<long long>(s.documents), static_cast<long long>(s.train_tokens),
              s.train_shards.size());
  if (!s.val_shards.empty())
    std::printf(", %lld val tokens in %zu shard(s)", static_cast<long long>(s.val_tokens),
                s.val_shards.size());
  std::printf(" in %s (vocab %d)\n", o.output_dir.c_str(), tok.vocab_size());
  return 0;
}

}  // namespace

int tokenize_main(const std::vector<std::string>& args) {
  const Args a("tokenize", args,
               {"input", "model", "model-prefix", "vocab-size", "model-type", "character-coverage",
                "max-lines", "threads", "output", "shard-tokens", "split", "val-tokens"},
               {"train", "byte-fallback", "verbose"});
  OCTET_CHECK(a.positional().empty(), "tokenize", "unexpected argument '",
              a.positional().empty() ? "" : a.positional().front(),
              "'; give files with --input a.txt,b.txt");
  OCTET_CHECK(a.has("input"), "tokenize", "give the text files with --input a.txt,b.txt");
  const std::vector<std::string> inputs = split_commas(a.get("input", ""));
  OCTET_CHECK(!inputs.empty(), "tokenize", "--input names no file");
  if (a.has("train")) return train(a, inputs);
  OCTET_CHECK(a.has("model"), "tokenize",
              "say what to do: --train --model-prefix P (train a tokenizer) or --model P.model "
              "--output DIR (encode)");
  return encode(a, inputs);
}

}  // namespace octet::cli
