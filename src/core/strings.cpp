// core/strings.cpp
#include "core/strings.h"

#include <algorithm>

namespace octet {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string closest_name(std::string_view typed, const std::vector<std::string>& candidates,
                         size_t max_edits) {
  std::string best;
  size_t best_distance = max_edits + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(typed, c);
    if (d < best_distance) best_distance = d, best = c;
  }
  return best;
}

}  // namespace octet
