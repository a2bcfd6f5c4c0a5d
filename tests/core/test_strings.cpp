// tests/core/test_strings.cpp: the edit distance behind "did you mean" suggestions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/strings.h"

namespace octet {
namespace {

TEST(EditDistance, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("steps", "steps"), 0u);
  EXPECT_EQ(edit_distance("step", "steps"), 1u);    // insertion
  EXPECT_EQ(edit_distance("stepss", "steps"), 1u);  // deletion
  EXPECT_EQ(edit_distance("stepz", "steps"), 1u);   // substitution
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", "cba"), edit_distance("cba", "abc"));  // symmetric
}

TEST(ClosestName, SuggestsOnlyNearMissesAndTheFirstOfEquals) {
  const std::vector<std::string> flags = {"--steps", "--seed", "--seq-len", "--lr"};
  EXPECT_EQ(closest_name("--stepz", flags), "--steps");
  EXPECT_EQ(closest_name("--sed", flags), "--seed");
  EXPECT_EQ(closest_name("--completely-different", flags), "");
  EXPECT_EQ(closest_name("--lrr", flags), "--lr");
  EXPECT_EQ(closest_name("--seeds", {"--seed", "--seeds2"}), "--seed");  // both 1 away: first
  EXPECT_EQ(closest_name("abcd", {"wxyz"}, 4), "wxyz");                  // within max_edits
  EXPECT_EQ(closest_name("abcd", {"wxyz"}, 3), "");
}

}  // namespace
}  // namespace octet
