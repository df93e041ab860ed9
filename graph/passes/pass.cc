// The pass registry, Pipeline and the --dump-after printing.
#include "graph/passes/pass.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <ostream>

#include "graph/onnx_io.h"
#include "graph/printer.h"

namespace graphrun::passes {

namespace {

// A deque: the PassInfo references handed out stay valid as passes register.
std::deque<PassInfo>& registry() {
  static std::deque<PassInfo> r;
  return r;
}

std::string names_of(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

const PassInfo& register_pass(const std::string& name, const std::string& description) {
  if (find_pass(name)) {
    // Runs at static initialisation, before anything could catch an exception.
    std::fprintf(stderr, "graphrun: internal error: pass '%s' is registered twice\n", name.c_str());
    std::abort();
  }
  registry().push_back(PassInfo{name, description});
  return registry().back();
}

std::vector<PassInfo> registered_passes() {
  std::vector<PassInfo> r(registry().begin(), registry().end());
  std::sort(r.begin(), r.end(), [](const PassInfo& a, const PassInfo& b) { return a.name < b.name; });
  return r;
}

const PassInfo* find_pass(const std::string& name) {
  for (const PassInfo& p : registry())
    if (p.name == name) return &p;
  return nullptr;
}

Pass make_pass(const PassInfo& info, std::string options, std::function<Graph(const Graph&)> run) {
  Pass p;
  p.info = &info;
  p.options = std::move(options);
  p.run = std::move(run);
  return p;
}

std::string format_options(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string s;
  for (const auto& [k, v] : kv)
    if (!v.empty()) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

Pipeline& Pipeline::add(Pass p) {
  passes_.push_back(std::move(p));
  return *this;
}

bool Pipeline::contains(const std::string& name) const {
  for (const Pass& p : passes_)
    if (p.name() == name) return true;
  return false;
}

Graph Pipeline::run(const Graph& g, const std::function<void(const Pass&, const Graph&)>& after) const {
  Graph r = g;
  for (const Pass& p : passes_) {
    r = p.run(r);
    if (after) after(p, r);
  }
  return r;
}

Pipeline Pipeline::until(const std::string& name) const {
  check_dump_after(name, this);
  Pipeline r;
  for (const Pass& p : passes_) {
    r.add(p);
    if (p.name() == name) break;
  }
  return r;
}

std::string Pipeline::listing() const {
  size_t wn = 0, wo = 0;
  for (const Pass& p : passes_) {
    wn = std::max(wn, p.name().size());
    wo = std::max(wo, p.options.size());
  }
  std::string s;
  for (const Pass& p : passes_) {
    std::string line = p.name() + std::string(wn - p.name().size() + 2, ' ');
    if (wo) line += p.options + std::string(wo - p.options.size() + 2, ' ');
    s += line + p.info->description + "\n";
  }
  return s;
}

void check_dump_after(const std::string& name, const Pipeline* pipeline) {
  if (!find_pass(name)) {
    std::vector<std::string> all;
    for (const PassInfo& p : registered_passes()) all.push_back(p.name);
    GR_FAIL("--dump-after: unknown pass '" << name << "' (passes: " << names_of(all) << ")");
  }
  if (pipeline && !pipeline->contains(name)) {
    std::vector<std::string> here;
    for (const Pass& p : pipeline->passes()) here.push_back(p.name());
    GR_FAIL("--dump-after: pass '" << name << "' is not in this pipeline (its passes: " << names_of(here) << ")");
  }
}

void dump_graph(std::ostream& os, const std::string& pass, const Graph& g) {
  // The passes keep what they know of types; inference fills in the rest for the reader. A graph
  // ONNX cannot infer is printed with what it has: the dump is for looking, not for checking.
  Graph shown = g;
  try {
    infer_shapes(shown);
  } catch (const Error&) {
    shown = g;
  }
  os << "# graph after pass " << pass << "\n" << print_text(shown);
}

}  // namespace graphrun::passes
