// Helpers of the data-source suites: catching an error's text, running a numpy script, reading a
// whole source into tensors.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "runtime/data/source.h"
#include "tests/test_util.h"

namespace graphrun::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Runs `script` with /usr/bin/python3 (numpy) in `dir`; fails the test on a non-zero exit.
inline void run_python(const std::string& dir, const std::string& script) {
  const std::string path = dir + "/make.py";
  std::ofstream(path) << "import numpy as np, os, sys\nos.chdir(" << '"' << dir << '"' << ")\n" << script;
  CommandResult r = run_command(python() + " " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// The same with onnx's helpers imported (onnx, helper, TensorProto, numpy_helper): for scripts that write models.
inline void run_onnx_python(const std::string& dir, const std::string& script) {
  run_python(dir, "import onnx\nfrom onnx import helper, TensorProto, numpy_helper\n" + script);
}

// Every example of `src`, each array as one tensor [N, ...].
inline std::map<std::string, Tensor> read_all(const runtime::data::Source& src) {
  std::map<std::string, Tensor> all;
  std::map<std::string, Tensor*> out;
  const int64_t n = src.size();
  for (const auto& a : src.arrays()) {
    Shape s{n};
    s.insert(s.end(), a.shape.begin(), a.shape.end());
    all.emplace(a.name, Tensor(a.dtype, s));
  }
  for (auto& [name, t] : all) out[name] = &t;
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  src.read(idx.data(), n, out);
  return all;
}

inline bool bytes_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

inline bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(runtime::data::kDefaultDataDir) + "/t10k-images-idx3-ubyte.gz");
}

}  // namespace graphrun::testing
