// cli/sample_text.h: what `octet sample` reads and prints: a text prompt through the
// tokenizer (--tokenizer, else the one the checkpoint carries) and text out, or token ids
// with --ids (and wherever no tokenizer is known).
// defines: SamplePrompt, sample_prompt, sample_output
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace octet::cli {

struct SamplePrompt {
  std::vector<int32_t> ids;                    // what the model continues
  std::unique_ptr<data::Tokenizer> tokenizer;  // null: ids in, ids out
  size_t lead = 0;  // ids before the prompt's own (the document separator), not printed
};

// The prompt of `octet sample`. With a tokenizer (`tokenizer_flag`, else
// <step_dir>/tokenizer.model when this build has SentencePiece) and without `ids_only`, the
// text is encoded after an eos, the document separator the shards put before every document.
// Otherwise it is comma-separated ids ("" gives {0}); an error names --prompt.
SamplePrompt sample_prompt(const std::string& step_dir, const std::string& prompt,
                           const std::string& tokenizer_flag, bool ids_only);

// The line `octet sample` prints for `tokens` (the prompt's ids and the generated ones):
// the decoded text, or comma-separated ids.
std::string sample_output(const SamplePrompt& prompt, const std::vector<int32_t>& tokens);

// Parses "1,2,3" into ids; throws "[sample] --prompt ..." naming the bad entry.
std::vector<int32_t> parse_prompt_ids(const std::string& text);

}  // namespace octet::cli
