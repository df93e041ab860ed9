// Helpers for the math/shape/reduce/loss kernel tests: run a node twice (fresh, then planned memory),
// naive broadcasting index maps, and tensors of any dtype from doubles.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "graph/half.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun::mathtest {

// Runs a one-node graph twice: the first run allocates and records shapes, the second runs on the
// planned arena (where scratch memory is reused). Both must agree; returns the second run's outputs.
inline std::vector<Tensor> run_op(const std::string& op, const std::vector<Tensor>& inputs,
                                  const std::map<std::string, Attribute>& attrs = {}, int num_outputs = 1,
                                  int64_t opset = 17, const std::string& domain = "", int threads = 1) {
  std::map<std::string, Tensor> feeds;
  Graph g = testing::single_node_graph(op, inputs, attrs, num_outputs, opset, domain, feeds);
  runtime::ExecOptions opts;
  opts.threads = threads;
  runtime::Executor ex(g, opts);
  std::vector<Tensor> first;
  auto out1 = ex.run(feeds);
  for (const auto& name : g.outputs) first.push_back(out1.at(name).clone());
  auto out2 = ex.run(feeds);
  std::vector<Tensor> r;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    r.push_back(out2.at(g.outputs[i]).clone());
    EXPECT_EQ(r.back().shape(), first[i].shape());
    if (r.back().shape() == first[i].shape() && r.back().dtype() == first[i].dtype()) {
      EXPECT_EQ(std::memcmp(r.back().raw(), first[i].raw(), r.back().nbytes()), 0) << op << ": the planned run differs";
    }
  }
  return r;
}

// A tensor of dtype `dt` holding `v` converted (bool: v != 0).
inline Tensor make(DType dt, const Shape& shape, const std::vector<double>& v) {
  Tensor t(dt, shape);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    void* p = t.raw();
    switch (dt) {
      case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v[i]); break;
      case DType::F64: static_cast<double*>(p)[i] = v[i]; break;
      case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v[i]); break;
      case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v[i]); break;
      case DType::I16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v[i]); break;
      case DType::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v[i]); break;
      case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v[i]); break;
      case DType::U16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v[i]); break;
      case DType::U32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v[i]); break;
      case DType::U64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v[i]); break;
      case DType::Bool: static_cast<uint8_t*>(p)[i] = v[i] != 0; break;
      case DType::F16: static_cast<uint16_t*>(p)[i] = wide_to_half(v[i]); break;
      case DType::BF16: static_cast<uint16_t*>(p)[i] = wide_to_bf16(v[i]); break;
      default: ADD_FAILURE() << "make: unsupported dtype";
    }
  }
  return t;
}

inline Tensor i64s(const std::vector<int64_t>& v) {
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v);
}

// Random tensor of any numeric dtype (integers in [-5, 5], or [0, 9] for unsigned; floats in [lo, hi)).
inline Tensor rand(DType dt, const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor f = testing::random_tensor(shape, seed, static_cast<float>(lo), static_cast<float>(hi));
  std::vector<double> v = f.as_doubles();
  if (!dtype_is_float(dt)) {
    bool unsig = dt == DType::U8 || dt == DType::U16 || dt == DType::U32 || dt == DType::U64 || dt == DType::Bool;
    for (double& x : v) x = unsig ? std::floor((x - lo) / (hi - lo) * 10) : std::round((x - lo) / (hi - lo) * 10 - 5);
  }
  if (dt == DType::Bool)
    for (double& x : v) x = static_cast<int64_t>(x) % 2;
  return make(dt, shape, v);
}

// The row-major strides of `s`.
inline std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;) st[k - 1] = st[k] * s[k];
  return st;
}

// Multi-index of flat position `i` in `s`.
inline std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t k = s.size(); k-- > 0;) {
    idx[k] = s[k] ? i % s[k] : 0;
    if (s[k]) i /= s[k];
  }
  return idx;
}

// Flat position in `in` of the element that numpy broadcasting maps to `out_idx` of the output.
inline int64_t broadcast_source(const std::vector<int64_t>& out_idx, const Shape& in) {
  const size_t off = out_idx.size() - in.size();
  auto st = strides_of(in);
  int64_t p = 0;
  for (size_t k = 0; k < in.size(); ++k) p += (in[k] == 1 ? 0 : out_idx[off + k]) * st[k];
  return p;
}

inline void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what = "") {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape())) << what;
  EXPECT_LE(testing::max_abs_diff(got, want), tol) << what << "\n got  " << got.str(12) << "\n want " << want.str(12);
}

// Expects `f` to throw a graphrun::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << (parts.empty() ? "" : parts[0]) << "'";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "message: " << m << "\nmissing: " << p;
  }
}

}  // namespace graphrun::mathtest

namespace graphrun::mathtest {

// A deterministic f64 tensor that numpy can rebuild: x[i] = sin(i + 1) * scale, reshaped.
inline Tensor sin_tensor(const Shape& shape, double scale = 1) {
  Tensor t(DType::F64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<double*>(t.raw())[i] = std::sin(static_cast<double>(i + 1)) * scale;
  return t;
}

inline std::string py_sin(const Shape& shape, double scale = 1) {
  // math.sin is the C library's sin, as std::sin: bit-identical values on both sides.
  std::string s = "(np.array([math.sin(i + 1) for i in range(" + std::to_string(shape_numel(shape)) +
                  ")], dtype=np.float64) * " + std::to_string(scale) + ").reshape((";
  for (int64_t d : shape) s += std::to_string(d) + ",";
  return s + "))";
}

// Evaluates numpy expressions (numpy is `np`) in one /usr/bin/python3 run; returns each result
// as an f64 tensor (bools and ints converted). `prelude` runs first (imports). Fails the test if Python fails.
inline std::vector<Tensor> numpy_eval(const std::vector<std::string>& exprs, const std::string& tag,
                                       const std::string& prelude = "") {
  std::string dir = testing::temp_dir("numpy_" + tag);
  std::string script = dir + "/eval.py";
  {
    FILE* f = std::fopen(script.c_str(), "w");
    std::fputs("import math\nimport numpy as np\n", f);
    std::fputs((prelude + "\n").c_str(), f);
    for (const auto& e : exprs) {
      std::fputs(("r = np.asarray(" + e + ", dtype=np.float64)\n").c_str(), f);
      std::fputs("print(' '.join(str(d) for d in r.shape) + '|' + ' '.join(repr(float(v)) for v in r.flatten()))\n", f);
    }
    std::fclose(f);
  }
  auto res = testing::run_command(testing::python() + " " + script);
  std::vector<Tensor> r;
  EXPECT_EQ(res.exit_code, 0) << res.output;
  if (res.exit_code != 0) return r;
  std::istringstream lines(res.output);
  std::string line;
  while (std::getline(lines, line)) {
    auto bar = line.find('|');
    if (bar == std::string::npos) continue;
    std::istringstream sh(line.substr(0, bar)), vs(line.substr(bar + 1));
    Shape shape;
    int64_t d;
    while (sh >> d) shape.push_back(d);
    std::vector<double> v;
    std::string tok;
    while (vs >> tok) v.push_back(tok == "nan" ? NAN : tok == "inf" ? INFINITY : tok == "-inf" ? -INFINITY : std::stod(tok));
    r.push_back(make(DType::F64, shape, v));
  }
  EXPECT_EQ(r.size(), exprs.size()) << res.output;
  return r;
}

// `t` converted to f64 (for comparing integer or f32 results with numpy's).
inline Tensor as_f64(const Tensor& t) { return make(DType::F64, t.shape(), t.as_doubles()); }

}  // namespace graphrun::mathtest
