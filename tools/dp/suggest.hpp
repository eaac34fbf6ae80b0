// "Did you mean …?" for a mistyped command or flag: the closest of the known names by edit
// distance, when it is close enough to be a typo.
#pragma once
#include <string>
#include <vector>

namespace dp::cli {

// The candidate nearest `word` (Levenshtein distance, ties to the first), or "" when even the
// nearest needs more than a third of the word's letters changed (at least 2 allowed).
std::string closest(const std::string& word, const std::vector<std::string>& candidates);
// " (did you mean 'X'?)" or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace dp::cli
