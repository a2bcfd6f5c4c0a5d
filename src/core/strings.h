// core/strings.h: near-miss suggestions for names a user typed (flags, config fields).
// defines: edit_distance, closest_name
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace octet {

// Levenshtein distance: the fewest single-character insertions, deletions and
// substitutions that turn a into b.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `typed` if it is at most `max_edits` edits away (the first
// of equally near ones), else "".
std::string closest_name(std::string_view typed, const std::vector<std::string>& candidates,
                         size_t max_edits = 2);

}  // namespace octet
