// The pass infrastructure: a pass is a named Graph -> Graph function, registered with a one-line
// description; a Pipeline runs passes in order and can print the graph after one (--dump-after).
#pragma once
#include <functional>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace graphrun::passes {

// A registered pass: the name `show --passes` lists and `--dump-after` takes, and what it does.
struct PassInfo {
  std::string name;
  std::string description;  // one line
};

// Registers a pass; each pass file registers its own, at static initialisation, next to the factory
// that binds its options. The factory is what pipelines call, so linking a pipeline links the file
// and its registration with it. A second registration of a name aborts (a programming error).
const PassInfo& register_pass(const std::string& name, const std::string& description);
// Every registered pass, by name.
std::vector<PassInfo> registered_passes();
// nullptr when no pass has that name.
const PassInfo* find_pass(const std::string& name);

// One step of a pipeline: a registered pass with its options bound.
struct Pass {
  const PassInfo* info = nullptr;
  std::string options;  // as `show --passes` prints them: "key=value key=value", "" for none
  std::function<Graph(const Graph&)> run;
  const std::string& name() const { return info->name; }
};
// A Pass of the registered `info` running `run` (the pass files' factories use it).
Pass make_pass(const PassInfo& info, std::string options, std::function<Graph(const Graph&)> run);
// "k1=v1 k2=v2" from (key, value) pairs, leaving out those with an empty value.
std::string format_options(const std::vector<std::pair<std::string, std::string>>& kv);

// An ordered list of passes.
class Pipeline {
 public:
  Pipeline& add(Pass p);
  const std::vector<Pass>& passes() const { return passes_; }
  bool contains(const std::string& name) const;
  // Runs the passes in order on a copy of g; `after`, when set, sees the graph after each pass.
  Graph run(const Graph& g, const std::function<void(const Pass&, const Graph&)>& after = {}) const;
  // The passes up to and including `name` (which must be one of them).
  Pipeline until(const std::string& name) const;
  // One line per pass: its name, its options, its description.
  std::string listing() const;

 private:
  std::vector<Pass> passes_;
};

// The --dump-after argument: Error unless `name` is a registered pass ("unknown pass ... (passes:
// <all registered>)") and, given a pipeline, one of its passes ("... is not in this pipeline").
void check_dump_after(const std::string& name, const Pipeline* pipeline = nullptr);
// Writes g as text (print_text, shapes inferred where ONNX can), headed "# graph after pass NAME".
void dump_graph(std::ostream& os, const std::string& pass, const Graph& g);

}  // namespace graphrun::passes
