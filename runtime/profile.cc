// --profile: recording timelines, the Chrome trace writer and the table of ops by total time.
#include "runtime/profile.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "graph/atomic_file.h"

namespace graphrun::runtime {

ProfileTrack& Profiler::track(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  tracks_.emplace_back(*this, static_cast<int>(tracks_.size()) + 1, name);
  return tracks_.back();
}

std::map<std::string, OpTotals> Profiler::op_totals() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, OpTotals> t;
  for (const ProfileTrack& tr : tracks_)
    for (const ProfileEvent& e : tr.events())
      if (e.cat == "kernel") {
        OpTotals& o = t[std::string(e.name)];
        ++o.count;
        o.ns += e.dur_ns;
        o.flops += e.flops;
      }
  return t;
}

int64_t Profiler::phase_ns(const std::string& phase) const {
  std::lock_guard<std::mutex> l(mu_);
  int64_t ns = 0;
  for (const ProfileTrack& tr : tracks_)
    for (const ProfileEvent& e : tr.events())
      if (e.cat == "phase" && e.name == phase) ns += e.dur_ns;
  return ns;
}

void Profiler::write_trace(const std::string& path) const {
  try {
    write_trace_file(path);
  } catch (const Error& e) {
    throw Error(std::string("--profile ") + e.what());  // "--profile t.json: cannot write: No space left on device"
  }
}

void Profiler::write_trace_file(const std::string& path) const {
  // Streamed event by event into a file written whole or not at all: a long run's trace (tens of
  // megabytes) never exists a second time in memory as one JSON document (it took 20 times its size).
  AtomicFile f(path);
  std::string buf = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto put = [&](const nlohmann::json& j) {
    if (!first) buf += ",\n";
    first = false;
    buf += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // node names may hold any bytes
    if (buf.size() >= (size_t(1) << 20)) {
      f.write(buf);
      buf.clear();
    }
  };
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const ProfileTrack& tr : tracks_) {
      put({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", tr.id()}, {"args", {{"name", tr.name()}}}});
      put({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", 1}, {"tid", tr.id()}, {"args", {{"sort_index", tr.id()}}}});
      for (const ProfileEvent& e : tr.events()) {
        nlohmann::json j{{"ph", "X"}, {"name", std::string(e.name)}, {"cat", std::string(e.cat)}, {"pid", 1}, {"tid", tr.id()},
                         {"ts", e.begin_ns / 1e3}, {"dur", e.dur_ns / 1e3}};
        if (!e.node.empty()) j["args"]["node"] = std::string(e.node);
        if (e.flops > 0) {
          j["args"]["gflop"] = e.flops / 1e9;
          if (e.dur_ns > 0) j["args"]["gflop_per_s"] = e.flops / e.dur_ns;
        }
        put(j);
      }
    }
  }
  buf += "\n]}\n";
  f.write(buf);
  f.commit();
}

void Profiler::finish(const std::string& path, const std::string& phase, std::ostream& os) const {
  write_trace(path);
  if (windowed()) {
    os << "profile: steps " << first_step_ << " to " << (last_step_ > 0 ? std::to_string(last_step_) : "the end")
       << " (--profile-steps)";
    if (phase_ns(phase) == 0) os << "; the run trained none of them";
    os << "\n";
  }
  print_table(os, phase);
  os << "profile: wrote " << path << " (open it in Perfetto, ui.perfetto.dev, or chrome://tracing)" << std::endl;
}

void Profiler::print_table(std::ostream& os, const std::string& phase) const {
  const std::map<std::string, OpTotals> totals = op_totals();
  const double phase_ms = phase_ns(phase) / 1e6;
  std::vector<std::pair<std::string, OpTotals>> rows(totals.begin(), totals.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %9s %11s %7s%% %9s\n", "op", "count", "ms", phase.c_str(), "GFLOP/s");
  os << line;
  double sum_ms = 0;
  for (const auto& [op, t] : rows) {
    const double ms = t.ns / 1e6;
    sum_ms += ms;
    char rate[32] = "";
    if (t.flops > 0 && t.ns > 0) std::snprintf(rate, sizeof rate, "%.1f", t.flops / t.ns);
    std::snprintf(line, sizeof line, "%-28s %9lld %11.1f %8.1f %9s\n", op.c_str(), static_cast<long long>(t.count), ms,
                  phase_ms > 0 ? 100 * ms / phase_ms : 0.0, rate);
    os << line;
  }
  std::snprintf(line, sizeof line, "%-28s %9s %11.1f %8.1f   (%s time: %.1f ms over all tracks)\n", "all kernels", "",
                sum_ms, phase_ms > 0 ? 100 * sum_ms / phase_ms : 0.0, phase.c_str(), phase_ms);
  os << line;
  // Where the blocking AllReduce kernels' time went (the communicators' "comm" events, inside them).
  std::map<std::string, OpTotals> comm;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const ProfileTrack& tr : tracks_)
      for (const ProfileEvent& e : tr.events())
        if (e.cat == "comm") {
          OpTotals& c = comm[std::string(e.name)];
          ++c.count;
          c.ns += e.dur_ns;
        }
  }
  const auto ar = totals.find("AllReduce");
  if (comm.empty() || ar == totals.end()) return;
  os << "AllReduce, where its time went (waits are peers still computing, not communication):\n";
  int64_t inside = 0;
  auto row = [&](const std::string& name, int64_t count, int64_t ns) {
    std::snprintf(line, sizeof line, "  %-26s %9lld %11.1f %8.1f\n", name.c_str(), static_cast<long long>(count),
                  ns / 1e6, phase_ms > 0 ? 100 * ns / 1e6 / phase_ms : 0.0);
    os << line;
  };
  for (const char* name : {"wait for replicas", "wait for ranks", "transfer", "sum", "copy"}) {
    const auto it = comm.find(name);
    if (it == comm.end()) continue;
    row(name, it->second.count, it->second.ns);
    inside += it->second.ns;
  }
  row("rest (pack, unpack)", ar->second.count, std::max<int64_t>(0, ar->second.ns - inside));
}

namespace {

int64_t prod(const Shape& s, size_t from) {
  int64_t p = 1;
  for (size_t i = from; i < s.size(); ++i) p *= s[i];
  return p;
}

}  // namespace

ProfileSpan optimizer_span(const Graph& g) {
  int last = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op_type == "AllReduce") last = static_cast<int>(i);
  return {"optimizer", last + 1, static_cast<int>(g.nodes.size()) - 1};
}

void record_node(ProfileTrack& t, const std::vector<ProfileSpan>& spans, std::vector<int64_t>& span_begin, int s,
                 const Node& n, const std::vector<const Tensor*>& inputs, const Tensor* out0, int64_t begin_ns) {
  const int64_t end = t.now();
  size_t bytes_in = 0;
  for (const Tensor* in : inputs)
    if (in) bytes_in += in->nbytes();
  t.add({n.op_type, "kernel", n.name, begin_ns, end - begin_ns, kernel_flops(n, inputs, out0), bytes_in});
  span_begin.resize(spans.size(), 0);
  for (size_t k = 0; k < spans.size(); ++k) {
    if (spans[k].first == s) span_begin[k] = begin_ns;
    if (spans[k].last == s) t.add({spans[k].name, "phase", "", span_begin[k], end - span_begin[k], 0});
  }
}

double kernel_flops(const Node& n, const std::vector<const Tensor*>& in, const Tensor* out0) {
  auto have = [&](size_t i) { return i < in.size() && in[i] && in[i]->defined(); };
  // The fused ops of pass fuse_relu_epilogue count their product's FLOPs (the Relu's are noise).
  const std::string op = n.op_type.rfind("Fused", 0) == 0 ? n.op_type.substr(5) : n.op_type;
  if (op == "Conv" && have(1) && out0 && out0->defined() && out0->rank() >= 2) {
    // Y [N, M, out...] from W [M, C/group, k...]: every output element is a dot product of C/group * k taps.
    const Shape& w = in[1]->shape();
    return 2.0 * static_cast<double>(out0->numel()) * static_cast<double>(prod(w, 1));
  }
  if (n.op_type == "ConvGrad" && have(0) && have(2)) {
    // dX and dW each cost what the forward convolution does.
    const double fwd = 2.0 * static_cast<double>(in[0]->numel()) * static_cast<double>(prod(in[2]->shape(), 1));
    return fwd * ((n.has_output(0) ? 1 : 0) + (n.has_output(1) ? 1 : 0));
  }
  if ((op == "Gemm" || op == "MatMul") && have(0) && out0 && out0->defined()) {
    const Shape& a = in[0]->shape();
    if (a.empty()) return 0;
    int64_t k = a.back();
    if (op == "Gemm" && a.size() == 2 && n.attr_i("transA", 0)) k = a[0];
    return 2.0 * static_cast<double>(out0->numel()) * static_cast<double>(k);
  }
  return 0;
}

}  // namespace graphrun::runtime
