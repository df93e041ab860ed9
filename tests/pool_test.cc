// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, MaxPoolGrad, AveragePoolGrad on the CPU:
// against direct loops in double over strides, pads, dilations, auto_pad, ceil_mode,
// count_include_pad, storage_order; the gradient ops against central differences of the forward ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/nn_test_util.h"

namespace graphrun::testing {
namespace {

// The case tables list only the leading fields each case sets; the rest keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
struct PoolCase {
  std::string name;
  Shape x;
  std::vector<int64_t> kernel, strides, pads, dilations;
  std::string auto_pad;
  int ceil_mode = 0, count_include_pad = 0, storage_order = 0;
};

Attrs attrs_of(const PoolCase& c, bool is_max) {
  Attrs a{{"kernel_shape", ints(c.kernel)}};
  if (!c.strides.empty()) a["strides"] = ints(c.strides);
  if (!c.pads.empty()) a["pads"] = ints(c.pads);
  if (!c.dilations.empty()) a["dilations"] = ints(c.dilations);
  if (!c.auto_pad.empty()) a["auto_pad"] = str(c.auto_pad);
  if (c.ceil_mode) a["ceil_mode"] = int1(1);
  if (c.count_include_pad && !is_max) a["count_include_pad"] = int1(1);
  if (c.storage_order && is_max) a["storage_order"] = int1(1);
  return a;
}

struct Axes {
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0},
          pe[3] = {0, 0, 0}, out[3] = {1, 1, 1};
};

// Output sizes per the ONNX spec; with ceil_mode a last window starting in the end padding is
// dropped (PyTorch's rule).
Axes pool_axes(const PoolCase& c) {
  Axes a;
  const int nd = static_cast<int>(c.x.size()) - 2;
  for (int i = 0; i < nd; ++i) {
    const int j = 3 - nd + i;
    a.in[j] = c.x[2 + i];
    a.k[j] = c.kernel[i];
    a.s[j] = c.strides.empty() ? 1 : c.strides[i];
    a.d[j] = c.dilations.empty() ? 1 : c.dilations[i];
    const int64_t ek = (a.k[j] - 1) * a.d[j] + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      a.out[j] = (a.in[j] + a.s[j] - 1) / a.s[j];
      const int64_t total = std::max<int64_t>(0, (a.out[j] - 1) * a.s[j] + ek - a.in[j]);
      a.pb[j] = c.auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
      a.pe[j] = total - a.pb[j];
    } else {
      if (c.auto_pad != "VALID" && !c.pads.empty()) a.pb[j] = c.pads[i], a.pe[j] = c.pads[i + nd];
      const double span = static_cast<double>(a.in[j] + a.pb[j] + a.pe[j] - ek) / a.s[j];
      a.out[j] = static_cast<int64_t>(c.ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
      if (c.ceil_mode && (a.out[j] - 1) * a.s[j] >= a.in[j] + a.pb[j]) a.out[j]--;
    }
  }
  return a;
}

// Returns Y (and for max pooling the flat argmax indices in the requested storage order).
std::pair<Tensor, Tensor> ref_pool(const PoolCase& c, const Tensor& X, bool is_max) {
  const Axes a = pool_axes(c);
  const int nd = static_cast<int>(c.x.size()) - 2;
  Shape ys{c.x[0], c.x[1]};
  for (int j = 3 - nd; j < 3; ++j) ys.push_back(a.out[j]);
  Tensor Y(DType::F64, ys), Ind(DType::I64, ys);
  auto x = X.as_doubles();
  const int64_t planes = c.x[0] * c.x[1], I = a.in[0] * a.in[1] * a.in[2];
  int64_t o = 0;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o0 = 0; o0 < a.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < a.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < a.out[2]; ++o2, ++o) {
          double best = -INFINITY, sum = 0;
          int64_t arg = -1, inside = 0, padded = 0;
          for (int64_t k0 = 0; k0 < a.k[0]; ++k0)
            for (int64_t k1 = 0; k1 < a.k[1]; ++k1)
              for (int64_t k2 = 0; k2 < a.k[2]; ++k2) {
                const int64_t i0 = o0 * a.s[0] - a.pb[0] + k0 * a.d[0], i1 = o1 * a.s[1] - a.pb[1] + k1 * a.d[1],
                              i2 = o2 * a.s[2] - a.pb[2] + k2 * a.d[2];
                if (i0 >= -a.pb[0] && i0 < a.in[0] + a.pe[0] && i1 >= -a.pb[1] && i1 < a.in[1] + a.pe[1] &&
                    i2 >= -a.pb[2] && i2 < a.in[2] + a.pe[2])
                  ++padded;
                if (i0 < 0 || i0 >= a.in[0] || i1 < 0 || i1 >= a.in[1] || i2 < 0 || i2 >= a.in[2]) continue;
                ++inside;
                const double v = x[p * I + (i0 * a.in[1] + i1) * a.in[2] + i2];
                sum += v;
                if (v > best) {
                  best = v;
                  arg = c.storage_order ? i0 + i1 * a.in[0] + i2 * a.in[0] * a.in[1] : (i0 * a.in[1] + i1) * a.in[2] + i2;
                }
              }
          Y.data<double>()[o] = is_max ? best : sum / static_cast<double>(c.count_include_pad ? padded : inside);
          Ind.data<int64_t>()[o] = p * I + arg;
        }
  return {Y, Ind};
}

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {"k2s2", {2, 3, 6, 6}, {2, 2}, {2, 2}},
      {"k2s2_odd_sizes", {1, 2, 7, 5}, {2, 2}, {2, 2}},  // the last row and column are in no window
      {"k3s1_pads", {1, 2, 5, 6}, {3, 3}, {1, 1}, {1, 1, 1, 1}},
      {"asym_pads_strides", {2, 2, 7, 8}, {3, 2}, {2, 3}, {0, 1, 2, 1}},
      {"dilations", {1, 2, 8, 7}, {2, 3}, {1, 2}, {1, 0, 1, 1}, {2, 2}},
      {"ceil", {1, 2, 7, 6}, {3, 2}, {2, 2}, {}, {}, "", 1},
      {"ceil_drops_window_in_padding", {1, 2, 4, 4}, {2, 2}, {3, 3}, {1, 1, 1, 1}, {}, "", 1},
      {"ceil_include_pad", {1, 2, 7, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, "", 1, 1},
      {"include_pad", {2, 2, 5, 5}, {3, 3}, {2, 2}, {1, 2, 1, 0}, {}, "", 0, 1},
      {"same_upper", {1, 2, 7, 6}, {4, 3}, {2, 2}, {}, {}, "SAME_UPPER"},
      {"same_lower_include_pad", {1, 2, 7, 6}, {4, 3}, {2, 2}, {}, {}, "SAME_LOWER", 0, 1},
      {"valid", {1, 2, 7, 6}, {3, 2}, {2, 1}, {}, {}, "VALID"},
      {"pool1d", {2, 3, 9}, {3}, {2}, {1, 1}},
      {"pool3d", {1, 2, 4, 5, 5}, {2, 3, 2}, {2, 1, 2}, {0, 1, 1, 1, 0, 0}},
      {"storage_order", {2, 2, 5, 4}, {2, 2}, {1, 2}, {}, {}, "", 0, 0, 1},
      {"lenet_pool", {3, 20, 9, 9}, {2, 2}, {2, 2}},
  };
  return cases;
}

class Pool : public ::testing::TestWithParam<DType> {};

TEST_P(Pool, MaxPoolMatchesDirectLoopsWithIndices) {
  const DType dt = GetParam();
  int seed = 1;
  for (const PoolCase& c : pool_cases()) {
    Tensor x = as_dtype(random_tensor(c.x, seed++), dt);
    auto [y, ind] = ref_pool(c, x, true);
    for (int threads : {1, 2}) {
      auto got = run_node_ex("MaxPool", {x}, attrs_of(c, true), {true, true}, threads);
      ASSERT_EQ(got[0].shape(), y.shape()) << c.name;
      EXPECT_EQ(got[0].dtype(), dt);
      EXPECT_EQ(max_abs_diff(got[0], y), 0) << c.name;
      EXPECT_EQ(max_abs_diff(got[1], ind), 0) << c.name;
    }
    EXPECT_EQ(max_abs_diff(run_node("MaxPool", {x}, attrs_of(c, true))[0], y), 0) << c.name << " without Indices";
  }
}

TEST_P(Pool, AveragePoolMatchesDirectLoops) {
  const DType dt = GetParam();
  int seed = 100;
  for (const PoolCase& c : pool_cases()) {
    if (!c.dilations.empty()) continue;  // AveragePool has dilations only from opset 19
    Tensor x = as_dtype(random_tensor(c.x, seed++), dt);
    Tensor y = ref_pool(c, x, false).first;
    for (int threads : {1, 2}) {
      auto got = run_node_ex("AveragePool", {x}, attrs_of(c, false), {true}, threads);
      ASSERT_EQ(got[0].shape(), y.shape()) << c.name;
      EXPECT_LT(max_abs_diff(got[0], y), dt == DType::F64 ? 1e-14 : 1e-6) << c.name;
    }
  }
}

TEST_P(Pool, GlobalPoolsReduceEverySpatialAxis) {
  const DType dt = GetParam();
  for (const Shape& s : {Shape{2, 3, 5}, Shape{2, 3, 4, 5}, Shape{1, 2, 3, 2, 4}}) {
    Tensor x = as_dtype(random_tensor(s, 7), dt);
    Shape ys{s[0], s[1]};
    for (size_t i = 2; i < s.size(); ++i) ys.push_back(1);
    Tensor mean(DType::F64, ys), mx(DType::F64, ys);
    auto v = x.as_doubles();
    const int64_t I = x.numel() / (s[0] * s[1]);
    for (int64_t p = 0; p < s[0] * s[1]; ++p) {
      double sum = 0, m = -INFINITY;
      for (int64_t i = 0; i < I; ++i) sum += v[p * I + i], m = std::max(m, v[p * I + i]);
      mean.data<double>()[p] = sum / I;
      mx.data<double>()[p] = m;
    }
    Tensor ga = run_node("GlobalAveragePool", {x})[0], gm = run_node("GlobalMaxPool", {x})[0];
    ASSERT_EQ(ga.shape(), ys);
    EXPECT_LT(max_abs_diff(ga, mean), 1e-6);
    EXPECT_EQ(max_abs_diff(gm, mx), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Pool, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(PoolGrad, MaxPoolGradMatchesCentralDifferencesOfMaxPool) {
  int seed = 200;
  for (const PoolCase& c : pool_cases()) {
    if (c.storage_order || c.name == "lenet_pool") continue;  // MaxPoolGrad takes storage_order 0 indices
    Tensor x = random_f64(c.x, seed++);
    const Attrs at = attrs_of(c, true);
    auto fwd = run_node("MaxPool", {x}, at, 2);
    Tensor dy = random_f64(fwd[0].shape(), seed++);
    auto maxpool = [&](const std::vector<Tensor>& in) { return run_node("MaxPool", in, at)[0]; };
    for (int threads : {1, 2}) {
      Tensor dx = run_node_ex("MaxPoolGrad", {dy, fwd[1], x}, {}, {true}, threads, 17, "ai.graphrun")[0];
      EXPECT_LT(max_abs_diff(dx, numeric_gradient(maxpool, {x}, 0, dy)), 1e-8) << c.name;
    }
  }
}

TEST(PoolGrad, AveragePoolGradMatchesCentralDifferencesOfAveragePool) {
  int seed = 300;
  for (const PoolCase& c : pool_cases()) {
    if (!c.dilations.empty() || c.name == "lenet_pool") continue;
    Tensor x = random_f64(c.x, seed++);
    const Attrs at = attrs_of(c, false);
    auto avgpool = [&](const std::vector<Tensor>& in) { return run_node("AveragePool", in, at)[0]; };
    Tensor dy = random_f64(avgpool({x}).shape(), seed++);
    for (int threads : {1, 2}) {
      Tensor dx = run_node_ex("AveragePoolGrad", {dy, x}, at, {true}, threads, 17, "ai.graphrun")[0];
      EXPECT_LT(max_abs_diff(dx, numeric_gradient(avgpool, {x}, 0, dy)), 1e-8) << c.name;
    }
  }
}

// relu = 1 (pass fuse_pool_relu_grad): the pooling gradient then the Relu gradient in one node, bit for
// bit ReluGrad(PoolGrad(..), X) on every pooling case, f32 and f64, 1 and 2 threads; X holds
// negatives, zeros of both signs and a NaN (masked: not > 0), dY a NaN (kept where X > 0).
TEST(PoolGrad, ReluAttributeEqualsReluGradOfThePoolingGradientBitForBit) {
  int seed = 400;
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  int masked = 0;
  for (const PoolCase& c : pool_cases()) {
    if (c.storage_order) continue;  // MaxPoolGrad takes storage_order 0 indices
    for (DType dt : {DType::F32, DType::F64}) {
      Tensor x64 = random_f64(c.x, seed++);
      double* xv = x64.data<double>();
      xv[0] = 0.0, xv[1] = -0.0, xv[2] = std::nan("");
      const Tensor x = dt == DType::F64 ? x64 : Tensor::from_vector<float>(x64.shape(), [&] {
        std::vector<float> v;
        for (double d : x64.as_doubles()) v.push_back(static_cast<float>(d));
        return v;
      }());
      for (bool is_max : {true, false}) {
        if (is_max ? false : !c.dilations.empty()) continue;  // AveragePool takes no dilations
        Attrs at = attrs_of(c, is_max);
        std::vector<Tensor> in;
        if (is_max) {
          auto fwd = run_node("MaxPool", {x}, at, 2);
          Tensor dy = random_tensor(fwd[0].shape(), seed++);
          if (dt == DType::F64) dy = Tensor::from_vector<double>(dy.shape(), dy.as_doubles());
          in = {dy, fwd[1], x};
          at = {};
        } else {
          Tensor dy = random_tensor(run_node("AveragePool", {x}, at)[0].shape(), seed++);
          if (dt == DType::F64) dy = Tensor::from_vector<double>(dy.shape(), dy.as_doubles());
          in = {dy, x};
        }
        if (dt == DType::F64) in[0].data<double>()[0] = std::nan("");
        else in[0].data<float>()[0] = std::nanf("");
        const char* op = is_max ? "MaxPoolGrad" : "AveragePoolGrad";
        Attrs fused = at;
        fused["relu"] = Attribute::Int(1);
        for (int threads : {1, 2}) {
          const Tensor dx = run_node_ex(op, in, at, {true}, threads, 17, "ai.graphrun")[0];
          const Tensor want = run_node_ex("ReluGrad", {dx, x}, {}, {true}, threads, 17, "ai.graphrun")[0];
          const Tensor got = run_node_ex(op, in, fused, {true}, threads, 17, "ai.graphrun")[0];
          EXPECT_TRUE(same_bits(got, want)) << c.name << " " << op << " " << dtype_name(dt) << " threads " << threads;
          masked += max_abs_diff(dx, want) > 0;
        }
      }
    }
  }
  EXPECT_GT(masked, 0) << "no case where the mask changed anything";
  Attrs bad{{"kernel_shape", Attribute::Ints({2, 2})}, {"relu", Attribute::Int(2)}};
  Tensor x = random_tensor({1, 1, 4, 4}, 1);
  EXPECT_THROW(run_node_ex("AveragePoolGrad", {random_tensor({1, 1, 3, 3}, 2), x}, bad, {true}, 1, 17, "ai.graphrun"),
               Error);
}

// Without Indices (pass recompute_maxpool_argmax) MaxPoolGrad finds each 2x2 window's argmax again in X:
// bit for bit the scatter of MaxPool's own Indices, with ties (X on a coarse grid, +0 against -0), NaNs
// (two in one window too), a NaN and a -0 in dY, odd sizes (a row and a column no window covers),
// relu 0 and 1, f32 and f64, 1 and 2 threads.
TEST(PoolGrad, MaxPoolGradWithoutIndicesEqualsTheScatterOfMaxPoolsIndices) {
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  const Attrs window{{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}};
  int seed = 900, cases = 0;
  for (const Shape& shape : {Shape{2, 3, 8, 8}, Shape{2, 3, 9, 7}, Shape{1, 2, 2, 2}, Shape{3, 1, 5, 6}, Shape{1, 1, 24, 24},
                           Shape{1, 2, 6, 41}}) {  // rows of 20 windows: the vector loops of the row-by-row path
    for (DType dt : {DType::F32, DType::F64}) {
      std::vector<double> xv = random_f64(shape, seed++).as_doubles();
      for (double& v : xv) v = std::round(v * 2) / 2;  // -1, -0.5, 0, 0.5, 1: many ties
      xv[0] = 0.0, xv[1] = -0.0;  // a window whose top pair ties +0 against -0
      if (xv.size() > 8) xv[shape[3]] = std::nan(""), xv[shape[3] + 1] = std::nan(""), xv[5] = std::nan("");
      std::vector<double> gv = random_f64({shape[0], shape[1], shape[2] / 2, shape[3] / 2}, seed++).as_doubles();
      gv[0] = -0.0;
      if (gv.size() > 1) gv[1] = std::nan("");
      auto make = [&](const Shape& sh, const std::vector<double>& v) {
        if (dt == DType::F64) return Tensor::from_vector<double>(sh, v);
        std::vector<float> f(v.begin(), v.end());
        return Tensor::from_vector<float>(sh, f);
      };
      const Tensor x = make(shape, xv), dy = make({shape[0], shape[1], shape[2] / 2, shape[3] / 2}, gv);
      const Tensor idx = run_node("MaxPool", {x}, window, 2)[1];
      for (int relu : {0, 1}) {
        Attrs with{{"relu", Attribute::Int(relu)}}, without = window;
        without["relu"] = Attribute::Int(relu);
        for (int threads : {1, 2}) {
          const Tensor want = run_node_ex("MaxPoolGrad", {dy, idx, x}, with, {true}, threads, 17, "ai.graphrun")[0];
          const Tensor got = run_node_ex("MaxPoolGrad", {dy, Tensor(), x}, without, {true}, threads, 17, "ai.graphrun")[0];
          EXPECT_TRUE(same_bits(got, want)) << shape_str(shape) << " " << dtype_name(dt) << " relu " << relu
                                            << " threads " << threads << "\n" << got.str() << "\n" << want.str();
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 48);
  // Only plain 2x2 windows: others need MaxPool's Indices.
  const Tensor x = random_tensor({1, 1, 5, 5}, 3);
  const Attrs three{{"kernel_shape", Attribute::Ints({3, 3})}, {"strides", Attribute::Ints({2, 2})}};
  EXPECT_THROW(run_node_ex("MaxPoolGrad", {random_tensor({1, 1, 2, 2}, 4), Tensor(), x}, three, {true}, 1, 17,
                           "ai.graphrun"),
               Error);
}

TEST(Pool, MaxPoolOnBytes) {
  for (DType dt : {DType::U8, DType::I8}) {
    const PoolCase c{"bytes", {2, 3, 5, 6}, {3, 2}, {2, 2}, {1, 0, 1, 1}};
    Tensor x(dt, c.x);
    Tensor r = random_int_tensor(c.x, 9, dt == DType::U8 ? 0 : -128, dt == DType::U8 ? 256 : 128);
    for (int64_t i = 0; i < x.numel(); ++i) static_cast<uint8_t*>(x.raw())[i] = static_cast<uint8_t>(r.data<int64_t>()[i]);
    auto [y, ind] = ref_pool(c, x, true);
    auto got = run_node("MaxPool", {x}, attrs_of(c, true), 2, 12);
    EXPECT_EQ(got[0].dtype(), dt);
    EXPECT_EQ(max_abs_diff(got[0], y), 0);
    EXPECT_EQ(max_abs_diff(got[1], ind), 0);
  }
}

// The plain 2x2 stride-2 path (LeNet's, SimpleCNN's) on the inputs where a scan's order shows: ties
// (a ReLU's zeros, repeated values) keep the first maximum in the window's row-major order, and NaN
// wins and propagates, the last NaN's position being the index. Against that scan, written out here;
// rows exactly 2 * OW wide (the flat path) and with a column and row left over, every dtype.
TEST(Pool, MaxPool2x2KeepsTheScanOrderOnTiesAndNaNs) {
  const double levels[] = {0, 0, 0, 1, 2, -1, NAN};
  for (DType dt : {DType::F32, DType::F64, DType::U8, DType::I8}) {
    const bool fp = dt == DType::F32 || dt == DType::F64;
    for (const Shape& xs : {Shape{2, 3, 6, 8}, Shape{1, 2, 7, 5}, Shape{2, 2, 24, 24}, Shape{1, 1, 5, 9}}) {
      const PoolCase c{"ties", xs, {2, 2}, {2, 2}};
      Tensor codes = random_int_tensor(xs, 41, 0, fp ? 7 : 6);
      Tensor x(dt, xs);
      std::vector<double> v(x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) {
        v[i] = levels[codes.data<int64_t>()[i]];
        if (dt == DType::F32) x.data<float>()[i] = static_cast<float>(v[i]);
        else if (dt == DType::F64) x.data<double>()[i] = v[i];
        else if (dt == DType::U8) x.data<uint8_t>()[i] = static_cast<uint8_t>(v[i] + 1);
        else x.data<int8_t>()[i] = static_cast<int8_t>(v[i]);
        if (!fp) v[i] = dt == DType::U8 ? v[i] + 1 : v[i];
      }
      const int64_t OH = xs[2] / 2, OW = xs[3] / 2, I = xs[2] * xs[3];
      std::vector<double> want;
      std::vector<int64_t> want_at;
      for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t at = -1;
            for (int64_t k = 0; k < 4; ++k) {
              const int64_t i = p * I + (2 * oh + k / 2) * xs[3] + 2 * ow + k % 2;
              if (at < 0 || v[i] > v[at] || std::isnan(v[i])) at = i;
            }
            want.push_back(v[at]), want_at.push_back(at);
          }
      for (int threads : {1, 2}) {
        auto got = run_node_ex("MaxPool", {x}, attrs_of(c, true), {true, true}, threads);
        const std::vector<double> y = got[0].as_doubles();
        ASSERT_EQ(y.size(), want.size());
        for (size_t o = 0; o < want.size(); ++o) {
          EXPECT_TRUE(y[o] == want[o] || (std::isnan(y[o]) && std::isnan(want[o])))
              << dtype_name(dt) << " " << shape_str(xs) << " output " << o << ": " << y[o] << " vs " << want[o];
          EXPECT_EQ(got[1].data<int64_t>()[o], want_at[o]) << dtype_name(dt) << " " << shape_str(xs) << " output " << o;
        }
      }
    }
  }
}

// Every other 2-D and 1-D MaxPool whose windows each have a tap inside the input (a ResNet stem's 3x3
// stride 2 pad 1 among them) folds rows then columns branch-free; against the scan over each window's
// taps inside the input in row-major order, written out here, on the inputs where that order shows:
// ties (zeros, -0 against +0, repeated values), NaN (it wins, the last NaN's position is the index),
// and the type's lowest value (-inf; 0 for u8, -128 for i8), which must not let a padding tap win a
// window. Padding on every side, odd and even sizes, dilations, strides 1 to 3, ceil_mode, input
// rows of s * OW and of other widths, short and long output rows, small planes (several a block) and
// large ones (one a block): the passes' flat and row-by-row forms; with and without Indices, 1 and 2
// threads, every dtype.
TEST(Pool, MaxPoolWindowedKeepsTheScanOrderOnTiesAndNaNs) {
  const std::vector<PoolCase> cases = {
      {"resnet_stem_14", {2, 3, 14, 14}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
      {"resnet_stem_odd", {1, 2, 13, 15}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
      {"resnet_stem_wide", {1, 2, 9, 70}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
      {"resnet_stem_flat_wide", {1, 2, 6, 64}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
      {"pads_each_side", {2, 2, 11, 10}, {3, 3}, {2, 2}, {2, 0, 1, 2}},
      {"pads_end_only", {1, 2, 8, 9}, {3, 3}, {2, 2}, {0, 0, 2, 1}},
      {"k3s1p1", {1, 2, 7, 6}, {3, 3}, {1, 1}, {1, 1, 1, 1}},
      {"k3s1p1_long_rows", {1, 1, 5, 40}, {3, 3}, {1, 1}, {1, 1, 1, 1}},
      {"k2s2p1", {1, 2, 8, 8}, {2, 2}, {2, 2}, {1, 1, 1, 1}},
      {"k2s1", {1, 2, 5, 6}, {2, 2}, {1, 1}},
      {"k4s3_asym", {1, 2, 17, 16}, {4, 2}, {3, 3}, {1, 1, 2, 0}},
      {"k5s2p2", {1, 2, 12, 36}, {5, 5}, {2, 2}, {2, 2, 2, 2}},
      {"dilated", {1, 2, 12, 13}, {3, 2}, {2, 2}, {1, 1, 2, 1}, {2, 3}},
      {"ceil", {1, 2, 10, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, "", 1},
      {"same_upper", {1, 2, 9, 8}, {3, 3}, {2, 2}, {}, {}, "SAME_UPPER"},
      {"window_wider_than_input", {1, 2, 3, 2}, {3, 3}, {2, 2}, {1, 2, 1, 2}},
      {"pool1d", {2, 3, 33}, {3}, {2}, {1, 1}},
      {"large_planes_one_a_block", {1, 2, 70, 66}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
      {"large_planes_odd", {1, 2, 67, 71}, {3, 3}, {2, 2}, {1, 0, 0, 1}},
  };
  for (DType dt : {DType::F32, DType::F64, DType::U8, DType::I8}) {
    const bool fp = dt == DType::F32 || dt == DType::F64;
    // Codes: 0, 0, 1, 2, the lowest, then for floats -0 and NaN.
    const double lowest = dt == DType::U8 ? 0 : dt == DType::I8 ? -128 : -INFINITY;
    const double levels[] = {0, 0, 1, 2, lowest, -0.0, NAN};
    for (const PoolCase& c : cases) {
      const Axes a = pool_axes(c);
      Tensor codes = random_int_tensor(c.x, 43, 0, fp ? 7 : 5);
      Tensor x(dt, c.x);
      std::vector<double> v(x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) {
        v[i] = levels[codes.data<int64_t>()[i]];
        if (dt == DType::U8) v[i] = v[i] > 0 ? v[i] + 1 : v[i];  // u8: 0 is the lowest, then 1, 2, 3
        if (dt == DType::F32) x.data<float>()[i] = static_cast<float>(v[i]);
        else if (dt == DType::F64) x.data<double>()[i] = v[i];
        else if (dt == DType::U8) x.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
        else x.data<int8_t>()[i] = static_cast<int8_t>(v[i]);
      }
      const int64_t I = a.in[1] * a.in[2];
      std::vector<double> want;
      std::vector<int64_t> want_at;
      for (int64_t p = 0; p < c.x[0] * c.x[1]; ++p)
        for (int64_t oh = 0; oh < a.out[1]; ++oh)
          for (int64_t ow = 0; ow < a.out[2]; ++ow) {
            int64_t at = -1;
            for (int64_t kh = 0; kh < a.k[1]; ++kh)
              for (int64_t kw = 0; kw < a.k[2]; ++kw) {
                const int64_t ih = oh * a.s[1] - a.pb[1] + kh * a.d[1], iw = ow * a.s[2] - a.pb[2] + kw * a.d[2];
                if (ih < 0 || ih >= a.in[1] || iw < 0 || iw >= a.in[2]) continue;
                const int64_t i = p * I + ih * a.in[2] + iw;
                if (at < 0 || v[i] > v[at] || std::isnan(v[i])) at = i;
              }
            ASSERT_GE(at, 0) << c.name << ": a window with no tap inside";
            want.push_back(v[at]), want_at.push_back(at);
          }
      for (int threads : {1, 2})
        for (bool with_indices : {true, false}) {
          auto got = run_node_ex("MaxPool", {x}, attrs_of(c, true), {true, with_indices}, threads);
          const std::vector<double> y = got[0].as_doubles();
          ASSERT_EQ(y.size(), want.size()) << c.name;
          for (size_t o = 0; o < want.size(); ++o) {
            const std::string where = std::string(dtype_name(dt)) + " " + c.name + " threads " +
                                      std::to_string(threads) + " output " + std::to_string(o);
            EXPECT_TRUE((y[o] == want[o] && std::signbit(y[o]) == std::signbit(want[o])) ||
                        (std::isnan(y[o]) && std::isnan(want[o])))
                << where << ": " << y[o] << " vs " << want[o];
            if (with_indices) {
              EXPECT_EQ(got[1].data<int64_t>()[o], want_at[o]) << where;
            }
          }
        }
    }
  }
}

TEST(Pool, BadInputGivesClearErrors) {
  auto expect_error = [](const std::string& op, const std::vector<Tensor>& in, const Attrs& at,
                         const std::string& part, const std::string& domain = "") {
    try {
      run_node(op, in, at, 1, 17, domain);
      ADD_FAILURE() << "expected an error containing '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  Tensor x = random_tensor({1, 2, 4, 4}, 1);
  expect_error("MaxPool", {x}, {}, "kernel_shape");
  expect_error("MaxPool", {x}, {{"kernel_shape", ints({2})}}, "kernel_shape");
  expect_error("AveragePool", {x}, {{"kernel_shape", ints({5, 5})}}, "smaller than the kernel");
  expect_error("MaxPool", {random_tensor({4, 4}, 1)}, {{"kernel_shape", ints({2, 2})}}, "rank");
  expect_error("AveragePoolGrad", {random_tensor({1, 2, 3, 3}, 2), x}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}},
               "dY", "ai.graphrun");
  Tensor bad_index = Tensor::from_vector<int64_t>({1, 2, 1, 1}, {0, 0});
  expect_error("MaxPoolGrad", {random_tensor({1, 2, 1, 1}, 3), bad_index, x}, {}, "plane", "ai.graphrun");
}

}  // namespace
}  // namespace graphrun::testing
