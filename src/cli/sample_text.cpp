// cli/sample_text.cpp
#include "cli/sample_text.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace octet::cli {

std::vector<int32_t> parse_prompt_ids(const std::string& text) {
  std::vector<int32_t> ids;
  if (text.empty()) return {0};
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    char* stop = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &stop, 10);
    OCTET_CHECK(
        !item.empty() && stop != nullptr && *stop == '\0' && errno == 0 && v >= 0 && v <= INT32_MAX,
        "sample", "--prompt: '", item,
        "' is not a token id; without a tokenizer (--tokenizer, or one the checkpoint "
        "carries) or with --ids, the prompt is comma-separated ids such as 1,2,3");
    ids.push_back(static_cast<int32_t>(v));
    start = end + 1;
  }
  return ids;
}

SamplePrompt sample_prompt(const std::string& step_dir, const std::string& prompt,
                           const std::string& tokenizer_flag, bool ids_only) {
  SamplePrompt p;
  std::string path = tokenizer_flag;
  const std::string carried = step_dir + "/" + data::kShardTokenizerFile;
  if (path.empty() && data::tokenizer_available() && std::filesystem::exists(carried)) {
    path = carried;
  }
  if (ids_only || path.empty()) {
    p.ids = parse_prompt_ids(prompt);
    return p;
  }
  p.tokenizer = std::make_unique<data::Tokenizer>(data::Tokenizer::load(path));
  const int eos = p.tokenizer->eos_id();
  if (eos >= 0) p.ids.push_back(eos);
  p.lead = p.ids.size();
  p.tokenizer->encode_append(prompt, p.ids);
  return p;
}

std::string sample_output(const SamplePrompt& prompt, const std::vector<int32_t>& tokens) {
  if (prompt.tokenizer) {
    const size_t lead = std::min(prompt.lead, tokens.size());
    return prompt.tokenizer->decode(std::span<const int32_t>(tokens).subspan(lead));
  }
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? "," : "") + std::to_string(tokens[i]);
  return out;
}

}  // namespace octet::cli
