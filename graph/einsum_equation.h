// Einsum equations ("bhid,bhjd->bhij", "...ij,...jk", "ii->i") split into terms, read by the Einsum kernel
// and by its gradient rule. A term is its letters with "..." kept as written.
#pragma once
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "graph/error.h"

namespace graphrun {

struct EinsumEquation {
  std::vector<std::string> inputs;
  std::string output;  // the implicit output (ellipsis, then the letters used once, sorted) when there is no "->"
};

// The letters of a term without its ellipsis.
inline std::string einsum_letters(const std::string& term) {
  std::string r;
  for (char c : term)
    if (c != '.') r += c;
  return r;
}

inline bool einsum_has_ellipsis(const std::string& term) { return term.find("...") != std::string::npos; }

inline EinsumEquation parse_einsum(const std::string& equation) {
  std::string eq;
  for (char c : equation)
    if (!std::isspace(static_cast<unsigned char>(c))) eq += c;
  EinsumEquation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto check_term = [&](const std::string& t) {
    const size_t dots = std::count(t.begin(), t.end(), '.');
    GR_CHECK(dots == 0 || (dots == 3 && einsum_has_ellipsis(t)),
             "Einsum: equation '" << equation << "': term '" << t << "' has a '.' outside one '...'");
    for (char c : t)
      GR_CHECK(c == '.' || std::isalpha(static_cast<unsigned char>(c)),
               "Einsum: equation '" << equation << "': '" << c << "' is not a letter");
  };
  for (const auto& t : e.inputs) check_term(t);
  if (arrow != std::string::npos) {
    e.output = eq.substr(arrow + 2);
    check_term(e.output);
    const std::string out = einsum_letters(e.output);
    for (char c : out) {
      GR_CHECK(std::count(out.begin(), out.end(), c) == 1,
               "Einsum: equation '" << equation << "': output label '" << c << "' appears twice");
      bool used = false;
      for (const auto& t : e.inputs) used |= t.find(c) != std::string::npos;
      GR_CHECK(used, "Einsum: equation '" << equation << "': output label '" << c << "' is in no input");
    }
    bool any_ellipsis = false;
    for (const auto& t : e.inputs) any_ellipsis |= einsum_has_ellipsis(t);
    GR_CHECK(!einsum_has_ellipsis(e.output) || any_ellipsis,
             "Einsum: equation '" << equation << "': the output has '...' but no input does");
    return e;
  }
  std::map<char, int> count;
  bool ellipsis = false;
  for (const auto& t : e.inputs) {
    ellipsis |= einsum_has_ellipsis(t);
    for (char c : einsum_letters(t)) ++count[c];
  }
  if (ellipsis) e.output = "...";
  for (const auto& [c, n] : count)
    if (n == 1) e.output += c;
  return e;
}

}  // namespace graphrun
