// Helpers shared by the test suites (see test_util.h).
#include "tests/test_util.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

namespace graphrun::testing {

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor t(DType::F32, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

Tensor random_int_tensor(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi) {
  Tensor t(DType::I64, shape);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> d(lo, hi - 1);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

Node make_node(const std::string& name, const std::string& op, std::vector<std::string> inputs,
               std::vector<std::string> outputs) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

Graph single_node_graph(const std::string& op, const std::vector<Tensor>& inputs,
                        const std::map<std::string, Attribute>& attrs, int num_outputs, int64_t opset,
                        const std::string& domain, std::map<std::string, Tensor>& feeds) {
  Graph g;
  g.name = op + "_test";
  g.opsets[""] = opset;
  if (!domain.empty()) g.opsets[domain] = 1;
  Node n;
  n.name = "node";
  n.op_type = op;
  n.domain = domain;
  n.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    std::string name = "in" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(name);
    feeds[name] = inputs[i];
  }
  for (int i = 0; i < num_outputs; ++i) {
    n.outputs.push_back("out" + std::to_string(i));
    g.outputs.push_back(n.outputs.back());
  }
  g.nodes.push_back(n);
  return g;
}

std::vector<Tensor> run_node(const std::string& op, const std::vector<Tensor>& inputs,
                             const std::map<std::string, Attribute>& attrs, int num_outputs, int64_t opset,
                             const std::string& domain) {
  std::map<std::string, Tensor> feeds;
  Graph g = single_node_graph(op, inputs, attrs, num_outputs, opset, domain, feeds);
  runtime::Executor ex(g);
  auto out = ex.run(feeds);
  std::vector<Tensor> r;
  for (const auto& name : g.outputs) r.push_back(out.at(name).clone());
  return r;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  GR_CHECK(a.shape() == b.shape(), "shape " << shape_str(a.shape()) << " vs " << shape_str(b.shape()));
  auto x = a.as_doubles(), y = b.as_doubles();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    if (!std::isnan(x[i])) m = std::max(m, std::fabs(x[i] - y[i]));
  }
  return m;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  double scale = 1;
  for (double v : b.as_doubles()) scale = std::max(scale, std::fabs(v));
  return max_abs_diff(a, b) / scale;
}

// The environment may override the folders compiled in: test binaries built on one machine and run
// on another (tests/gpu/check.sh with a carried build) find the repository and build there.
static std::string dir_from_env(const char* name, const char* built) {
  const char* v = std::getenv(name);
  return v && *v ? v : built;
}
std::string source_dir() { return dir_from_env("GRAPHRUN_SOURCE_DIR", GRAPHRUN_SOURCE_DIR); }
std::string binary_dir() { return dir_from_env("GRAPHRUN_BINARY_DIR", GRAPHRUN_BINARY_DIR); }
std::string python() { return GRAPHRUN_PYTHON; }
std::string graphrun_cli() { return binary_dir() + "/graphrun"; }

CommandResult run_command(const std::string& cmd) {
  std::string full = cmd + " 2>&1";
  FILE* f = popen(full.c_str(), "r");
  CommandResult r{-1, ""};
  if (!f) return r;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0) r.output.append(buf, k);
  int st = pclose(f);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(GRAPHRUN_BINARY_DIR) / "test_tmp" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace graphrun::testing
