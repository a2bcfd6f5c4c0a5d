// cli/tokenize.cpp: `octet tokenize`: train a SentencePiece tokenizer on text files, or
// encode text files into token shards with one.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "data/tokenizer.h"

namespace octet::cli {
namespace {

struct TokenizeFlags {
  bool train = false;
  data::TokenizerTrainOptions train_options;  // inputs come from `inputs`
  data::TextShardOptions shard_options;
  std::vector<std::string> inputs;
  std::string model;  // encode: the tokenizer
  bool verbose = false;
};

int train_tokenizer(TokenizeFlags& f) {
  data::TokenizerTrainOptions& o = f.train_options;
  OCTET_CHECK(!o.model_prefix.empty(), "tokenize",
              "--train needs --model-prefix (writes PREFIX.model)");
  o.inputs = f.inputs;
  o.quiet = !f.verbose;
  data::tokenizer_train(o);
  const auto tok = data::Tokenizer::load(o.model_prefix + ".model");
  std::printf("tokenize: wrote %s.model and %s.vocab (%d pieces, %s)\n", o.model_prefix.c_str(),
              o.model_prefix.c_str(), tok.vocab_size(), o.model_type.c_str());
  return 0;
}

int encode(TokenizeFlags& f) {
  OCTET_CHECK(!f.shard_options.output_dir.empty(), "tokenize",
              "encoding needs --output DIR for the shards");
  const auto tok = data::Tokenizer::load(f.model);
  data::TextShardOptions& o = f.shard_options;
  o.inputs = f.inputs;
  const auto s = data::tokenize_files_to_shards(tok, o);
  // The shards carry their tokenizer: a run trained on them copies it into its checkpoints.
  const std::string recorded = o.output_dir + "/" + data::kShardTokenizerFile;
  std::error_code ec;
  if (!std::filesystem::equivalent(f.model, recorded, ec)) {
    std::filesystem::copy_file(f.model, recorded, std::filesystem::copy_options::overwrite_existing,
                               ec);
    OCTET_CHECK(!ec, "tokenize", "cannot copy ", f.model, " to ", recorded, ": ", ec.message());
  }
  std::printf("tokenize: %lld documents -> %lld train tokens in %zu shard(s)",
              static_cast<long long>(s.documents), static_cast<long long>(s.train_tokens),
              s.train_shards.size());
  if (!s.val_shards.empty())
    std::printf(", %lld val tokens in %zu shard(s)", static_cast<long long>(s.val_tokens),
                s.val_shards.size());
  std::printf(" in %s (vocab %d, tokenizer copied to %s)\n", o.output_dir.c_str(), tok.vocab_size(),
              recorded.c_str());
  return 0;
}

int tokenize(TokenizeFlags& f) {
  if (f.train) return train_tokenizer(f);
  OCTET_CHECK(!f.model.empty(), "tokenize",
              "say what to do: --train --model-prefix P (train a tokenizer) or --model P.model "
              "--output DIR (encode)");
  return encode(f);
}

}  // namespace

void add_tokenize_command(Commands& commands, CLI::App& octet) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* t = commands.add(
      octet, "tokenize",
      "train a SentencePiece tokenizer on text files (--train), or encode text files into token "
      "shards, an eos after each document",
      [f] { return tokenize(*f); });
  t->add_option("--input", f->inputs, "text files, comma-separated: a.txt,b.txt")
      ->required()
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  // Training a tokenizer.
  data::TokenizerTrainOptions& tr = f->train_options;
  t->add_flag("--train", f->train, "train a tokenizer (writes PREFIX.model and PREFIX.vocab)");
  t->add_option("--model-prefix", tr.model_prefix, "--train: output prefix, e.g. out/tok");
  t->add_option("--vocab-size", tr.vocab_size, "--train: pieces")->check(at_least(1));
  t->add_option("--model-type", tr.model_type, "--train: the SentencePiece algorithm")
      ->check(CLI::IsMember({"bpe", "unigram"}));
  t->add_option("--character-coverage", tr.character_coverage, "--train: share of characters kept")
      ->check(CLI::Range(0.0, 1.0));
  t->add_flag("--byte-fallback", tr.byte_fallback,
              "--train: unknown characters become byte pieces (vocab > 259)");
  t->add_option("--max-lines", tr.input_sentence_size,
                "--train: train on a sample of N lines (0: all)")
      ->check(at_least(0));
  t->add_option("--threads", tr.threads, "--train: threads (0: all cores)")->check(at_least(0));
  t->add_flag("--verbose", f->verbose, "--train: show SentencePiece's log");
  // Encoding into shards.
  data::TextShardOptions& sh = f->shard_options;
  t->add_option("--model", f->model, "encode with this tokenizer (tok.model)")
      ->check(CLI::ExistingFile);
  t->add_option("--output", sh.output_dir, "the shards' directory (DIR/train_000.bin, ...)");
  t->add_option("--shard-tokens", sh.shard_tokens, "tokens per shard")->check(at_least(1));
  add_parsed(*t, "--split", sh.split, data::document_split_from_name,
             "what a document is: blank (blank-line separated), line or file")
      ->default_str("blank");
  t->add_option("--val-tokens", sh.val_tokens,
                "the first documents, N tokens, go to DIR/val_000.bin, ...")
      ->check(at_least(0));
}

}  // namespace octet::cli
