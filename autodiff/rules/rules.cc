// gradient_rules(): the gradient column of the op table, built once.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

const std::unordered_map<std::string, RuleEntry>& gradient_rules() {
  static const std::unordered_map<std::string, RuleEntry> table = [] {
    std::unordered_map<std::string, RuleEntry> t;
    for (const auto& [key, f] : op_table().ops())
      if (f.gradient != GradientKind::Missing) t[key] = RuleEntry{f.rule, f.gradient == GradientKind::Rule};
    return t;
  }();
  return table;
}

}  // namespace graphrun::autodiff
