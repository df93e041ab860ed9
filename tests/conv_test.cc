// Conv, ConvTranspose, ConvGrad, ConvTransposeGrad on the CPU: against direct-loop references in
// double over the attributes that change the math, and the gradient ops against central differences.
#include <gtest/gtest.h>

#include <array>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "tests/nn_test_util.h"

namespace graphrun::testing {
namespace {

// The case tables list only the leading fields each case sets; the rest keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
struct ConvCase {
  std::string name;
  Shape x, w;
  int64_t group = 1;
  std::vector<int64_t> strides, pads, dilations;  // empty: attribute absent
  std::string auto_pad;                            // empty: attribute absent
  bool bias = true;
  std::vector<int64_t> output_padding, output_shape;  // ConvTranspose only
};

Attrs attrs_of(const ConvCase& c) {
  Attrs a;
  if (c.group != 1) a["group"] = int1(c.group);
  if (!c.strides.empty()) a["strides"] = ints(c.strides);
  if (!c.pads.empty()) a["pads"] = ints(c.pads);
  if (!c.dilations.empty()) a["dilations"] = ints(c.dilations);
  if (!c.auto_pad.empty()) a["auto_pad"] = str(c.auto_pad);
  if (!c.output_padding.empty()) a["output_padding"] = ints(c.output_padding);
  if (!c.output_shape.empty()) a["output_shape"] = ints(c.output_shape);
  return a;
}

// Per-axis numbers of a case, right-aligned into 3 axes (missing leading axes have size 1).
struct Axes {
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0},
          pe[3] = {0, 0, 0}, out[3] = {1, 1, 1}, op[3] = {0, 0, 0};
};

// Conv geometry written out from the ONNX spec, independently of the kernels' code.
Axes conv_axes(const ConvCase& c) {
  Axes a;
  const int nd = static_cast<int>(c.x.size()) - 2;
  for (int i = 0; i < nd; ++i) {
    const int j = 3 - nd + i;
    a.in[j] = c.x[2 + i];
    a.k[j] = c.w[2 + i];
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
      a.out[j] = (a.in[j] + a.pb[j] + a.pe[j] - ek) / a.s[j] + 1;
    }
  }
  return a;
}

Shape with_spatial(int64_t n, int64_t c, const int64_t* sp, int nd) {
  Shape s{n, c};
  for (int i = 3 - nd; i < 3; ++i) s.push_back(sp[i]);
  return s;
}

Tensor ref_conv(const ConvCase& c, const Tensor& X, const Tensor& W, const Tensor& B) {
  const Axes a = conv_axes(c);
  const int nd = static_cast<int>(c.x.size()) - 2;
  const int64_t N = c.x[0], C = c.x[1], M = c.w[0], Cg = C / c.group, Mg = M / c.group;
  std::vector<double> x = X.as_doubles(), w = W.as_doubles(), b = B.defined() ? B.as_doubles() : std::vector<double>(M, 0.0);
  Tensor Y(DType::F64, with_spatial(N, M, a.out, nd));
  double* y = Y.data<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o0 = 0; o0 < a.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < a.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < a.out[2]; ++o2) {
            double acc = b[m];
            const int64_t g = m / Mg;
            for (int64_t cc = 0; cc < Cg; ++cc)
              for (int64_t k0 = 0; k0 < a.k[0]; ++k0)
                for (int64_t k1 = 0; k1 < a.k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < a.k[2]; ++k2) {
                    const int64_t i0 = o0 * a.s[0] - a.pb[0] + k0 * a.d[0];
                    const int64_t i1 = o1 * a.s[1] - a.pb[1] + k1 * a.d[1];
                    const int64_t i2 = o2 * a.s[2] - a.pb[2] + k2 * a.d[2];
                    if (i0 < 0 || i0 >= a.in[0] || i1 < 0 || i1 >= a.in[1] || i2 < 0 || i2 >= a.in[2]) continue;
                    const int64_t xc = g * Cg + cc;
                    acc += x[(((n * C + xc) * a.in[0] + i0) * a.in[1] + i1) * a.in[2] + i2] *
                           w[(((m * Cg + cc) * a.k[0] + k0) * a.k[1] + k1) * a.k[2] + k2];
                  }
            y[(((n * M + m) * a.out[0] + o0) * a.out[1] + o1) * a.out[2] + o2] = acc;
          }
  return Y;
}

// ConvTranspose geometry from the ONNX spec: X [N, C, in], W [C, M/group, k], output [N, M, out].
Axes conv_transpose_axes(const ConvCase& c) {
  Axes a;
  const int nd = static_cast<int>(c.x.size()) - 2;
  for (int i = 0; i < nd; ++i) {
    const int j = 3 - nd + i;
    a.in[j] = c.x[2 + i];
    a.k[j] = c.w[2 + i];
    a.s[j] = c.strides.empty() ? 1 : c.strides[i];
    a.d[j] = c.dilations.empty() ? 1 : c.dilations[i];
    a.op[j] = c.output_padding.empty() ? 0 : c.output_padding[i];
    const int64_t ek = (a.k[j] - 1) * a.d[j] + 1, full = a.s[j] * (a.in[j] - 1) + a.op[j] + ek;
    const bool same = c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER";
    if (!c.output_shape.empty() || same) {
      a.out[j] = c.output_shape.empty() ? a.in[j] * a.s[j] : c.output_shape[i];
      const int64_t total = full - a.out[j];
      const int64_t half = static_cast<int64_t>(std::floor(total / 2.0));  // the spec's Python "//"
      a.pb[j] = c.auto_pad == "SAME_UPPER" ? half : total - half;
      a.pe[j] = total - a.pb[j];
    } else {
      if (c.auto_pad != "VALID" && !c.pads.empty()) a.pb[j] = c.pads[i], a.pe[j] = c.pads[i + nd];
      a.out[j] = full - a.pb[j] - a.pe[j];
    }
  }
  return a;
}

// Scatter definition: every input pixel adds W times itself at positions i*s + k*d - pad_begin.
Tensor ref_conv_transpose(const ConvCase& c, const Tensor& X, const Tensor& W, const Tensor& B) {
  const Axes a = conv_transpose_axes(c);
  const int nd = static_cast<int>(c.x.size()) - 2;
  const int64_t N = c.x[0], C = c.x[1], Cg = C / c.group, Mg = c.w[1], M = Mg * c.group;
  std::vector<double> x = X.as_doubles(), w = W.as_doubles(), b = B.defined() ? B.as_doubles() : std::vector<double>(M, 0.0);
  Tensor Y(DType::F64, with_spatial(N, M, a.out, nd));
  double* y = Y.data<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t p = 0; p < a.out[0] * a.out[1] * a.out[2]; ++p) y[(n * M + m) * a.out[0] * a.out[1] * a.out[2] + p] = b[m];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cc = 0; cc < C; ++cc)
      for (int64_t i0 = 0; i0 < a.in[0]; ++i0)
        for (int64_t i1 = 0; i1 < a.in[1]; ++i1)
          for (int64_t i2 = 0; i2 < a.in[2]; ++i2) {
            const double xv = x[(((n * C + cc) * a.in[0] + i0) * a.in[1] + i1) * a.in[2] + i2];
            const int64_t g = cc / Cg;
            for (int64_t ml = 0; ml < Mg; ++ml)
              for (int64_t k0 = 0; k0 < a.k[0]; ++k0)
                for (int64_t k1 = 0; k1 < a.k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < a.k[2]; ++k2) {
                    const int64_t o0 = i0 * a.s[0] + k0 * a.d[0] - a.pb[0];
                    const int64_t o1 = i1 * a.s[1] + k1 * a.d[1] - a.pb[1];
                    const int64_t o2 = i2 * a.s[2] + k2 * a.d[2] - a.pb[2];
                    if (o0 < 0 || o0 >= a.out[0] || o1 < 0 || o1 >= a.out[1] || o2 < 0 || o2 >= a.out[2]) continue;
                    const int64_t m = g * Mg + ml;
                    y[(((n * M + m) * a.out[0] + o0) * a.out[1] + o1) * a.out[2] + o2] +=
                        xv * w[(((cc * Mg + ml) * a.k[0] + k0) * a.k[1] + k1) * a.k[2] + k2];
                  }
          }
  return Y;
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {"basic", {2, 3, 7, 7}, {4, 3, 3, 3}},
      {"no_bias", {2, 3, 6, 5}, {2, 3, 2, 3}, 1, {}, {}, {}, "", false},
      {"strides_pads_dilations", {2, 3, 9, 8}, {4, 3, 3, 2}, 1, {2, 3}, {1, 0, 2, 1}, {2, 1}},
      {"group", {2, 4, 6, 6}, {6, 2, 3, 3}, 2, {1, 1}, {1, 1, 1, 1}},
      {"depthwise", {2, 4, 5, 5}, {4, 1, 3, 3}, 4, {2, 2}, {1, 1, 1, 1}},
      {"same_upper", {1, 2, 7, 6}, {3, 2, 4, 3}, 1, {2, 2}, {}, {}, "SAME_UPPER"},
      {"same_lower", {1, 2, 7, 6}, {3, 2, 4, 3}, 1, {2, 2}, {}, {}, "SAME_LOWER"},
      {"valid", {1, 2, 7, 6}, {3, 2, 3, 3}, 1, {2, 1}, {}, {}, "VALID"},
      {"conv1d", {2, 3, 10}, {2, 3, 3}, 1, {2}, {1, 2}, {2}},
      {"conv3d", {1, 2, 4, 5, 5}, {3, 2, 2, 3, 3}, 1, {1, 2, 1}, {1, 0, 1, 0, 1, 1}},
      {"lenet_conv2", {3, 20, 13, 13}, {50, 20, 5, 5}},
      {"large_image_group", {2, 4, 20, 20}, {6, 2, 3, 3}, 2, {1, 1}, {1, 1, 1, 1}},  // >= 256 pixels: per-image GEMMs
      // One input channel per group and <= 25 taps: the direct kernels (f32).
      {"lenet_conv1", {3, 1, 28, 28}, {20, 1, 3, 3}},
      {"simplecnn_conv", {2, 1, 28, 28}, {10, 1, 5, 5}, 1, {}, {}, {}, "", false},
      {"resnet_stem", {2, 1, 28, 28}, {8, 1, 3, 3}, 1, {}, {1, 1, 1, 1}},
      {"one_channel_row_stride_pads_dilations", {2, 1, 11, 9}, {3, 1, 3, 3}, 1, {2, 1}, {2, 1, 0, 3}, {2, 2}},
      {"one_channel_wide_rows", {1, 1, 5, 70}, {2, 1, 2, 3}, 1, {}, {0, 1, 0, 0}},  // 68-pixel rows: several blocks
      {"one_channel_narrow", {2, 1, 6, 3}, {2, 1, 1, 3}},                           // 1-pixel rows
      {"one_channel_1x1", {2, 1, 5, 17}, {3, 1, 1, 1}},
      {"depthwise_stride1", {2, 3, 9, 17}, {6, 1, 5, 5}, 3, {}, {2, 1, 2, 3}},
      {"conv1d_one_channel", {2, 1, 37}, {3, 1, 5}, 1, {}, {2, 2}},
      {"one_channel_36_taps", {1, 1, 9, 9}, {2, 1, 6, 6}},  // over the direct kernels' limit: GEMM
      // im2col's flat runs (stride 1, f32): rows of 2 (each 16 pixels from a window of 30, near the
      // two-register limit), pads on some sides only, 16 pixels an image (no partial vector), and an
      // image of 1089 output pixels, over the flat runs' limit of 1024 (the generic path instead).
      {"flat_rows_of_two", {3, 3, 9, 2}, {4, 3, 3, 3}, 1, {}, {1, 1, 1, 1}},
      {"flat_uneven_pads", {2, 2, 7, 10}, {3, 2, 2, 4}, 1, {}, {0, 2, 1, 0}},
      {"flat_whole_vectors", {5, 4, 6, 6}, {3, 4, 3, 3}, 1, {}, {1, 1, 1, 1}},
      {"flat_over_limit", {1, 2, 33, 33}, {2, 2, 3, 3}, 1, {}, {1, 1, 1, 1}},
      // An empty batch: an empty output, and nothing written (the per-image GEMM path once wrote an
      // image's output block, bias first, into the empty tensor).
      {"empty_batch", {0, 3, 5, 5}, {4, 3, 3, 3}, 1, {}, {1, 1, 1, 1}},
      {"empty_batch_large_image", {0, 2, 20, 20}, {3, 2, 3, 3}},
      {"empty_batch_one_channel", {0, 1, 28, 28}, {20, 1, 3, 3}},
  };
  return cases;
}

class ConvForward : public ::testing::TestWithParam<DType> {};

TEST_P(ConvForward, MatchesDirectLoopsForEveryAttributeCase) {
  const DType dt = GetParam();
  int seed = 1;
  for (const ConvCase& c : conv_cases()) {
    Tensor x = as_dtype(random_tensor(c.x, seed++), dt), w = as_dtype(random_tensor(c.w, seed++), dt);
    Tensor b = c.bias ? as_dtype(random_tensor({c.w[0]}, seed++), dt) : Tensor();
    Tensor want = ref_conv(c, x, w, b);
    for (int threads : {1, 2}) {
      auto got = run_node_ex("Conv", {x, w, b}, attrs_of(c), {true}, threads);
      ASSERT_EQ(got[0].dtype(), dt) << c.name;
      ASSERT_EQ(got[0].shape(), want.shape()) << c.name;
      EXPECT_LT(max_rel_diff(got[0], want), dt == DType::F64 ? 1e-12 : 1e-5) << c.name << " threads " << threads;
    }
  }
}

TEST_P(ConvForward, ConvTransposeMatchesScatterDefinition) {
  const DType dt = GetParam();
  const std::vector<ConvCase> cases = {
      {"basic", {2, 3, 4, 4}, {3, 2, 3, 3}},
      {"stride_pads_outpad", {2, 3, 4, 5}, {3, 2, 3, 2}, 1, {2, 3}, {1, 0, 0, 1}, {}, "", true, {1, 2}},
      {"dilations", {1, 2, 4, 4}, {2, 3, 3, 3}, 1, {2, 1}, {0, 1, 1, 0}, {2, 2}},
      {"group", {2, 4, 3, 3}, {4, 3, 3, 3}, 2, {2, 2}},
      {"output_shape", {1, 2, 3, 3}, {2, 2, 3, 3}, 1, {2, 2}, {}, {}, "", false, {}, {8, 7}},
      {"output_shape_beyond_full", {1, 1, 3, 3}, {1, 2, 3, 3}, 1, {3, 2}, {}, {}, "", false, {}, {10, 8}},
      {"output_shape_same_upper", {1, 1, 3, 3}, {1, 2, 3, 3}, 1, {3, 2}, {}, {}, "SAME_UPPER", false, {}, {11, 9}},
      {"same_upper", {1, 2, 3, 3}, {2, 1, 3, 3}, 1, {2, 2}, {}, {}, "SAME_UPPER"},
      {"same_lower", {1, 2, 3, 3}, {2, 1, 3, 3}, 1, {2, 2}, {}, {}, "SAME_LOWER"},
      {"conv1d", {2, 2, 5}, {2, 3, 3}, 1, {3}, {1, 1}},
  };
  int seed = 100;
  for (const ConvCase& c : cases) {
    Tensor x = as_dtype(random_tensor(c.x, seed++), dt), w = as_dtype(random_tensor(c.w, seed++), dt);
    Tensor b = c.bias ? as_dtype(random_tensor({c.w[1] * c.group}, seed++), dt) : Tensor();
    Tensor want = ref_conv_transpose(c, x, w, b);
    for (int threads : {1, 2}) {
      auto got = run_node_ex("ConvTranspose", {x, w, b}, attrs_of(c), {true}, threads);
      ASSERT_EQ(got[0].shape(), want.shape()) << c.name;
      EXPECT_LT(max_rel_diff(got[0], want), dt == DType::F64 ? 1e-12 : 1e-5) << c.name << " threads " << threads;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ConvForward, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ConvGrad's dX, dW, dB against central differences of Conv in double precision.
TEST(ConvGrad, MatchesCentralDifferencesOfConv) {
  const std::vector<ConvCase> cases = {
      {"basic", {2, 2, 5, 5}, {3, 2, 3, 3}},
      {"strides_pads_dilations", {2, 2, 7, 6}, {2, 2, 3, 2}, 1, {2, 3}, {1, 0, 2, 1}, {2, 1}},
      {"group", {1, 4, 5, 5}, {4, 2, 3, 3}, 2, {2, 1}, {1, 1, 0, 0}},
      {"same_lower", {1, 2, 6, 5}, {2, 2, 4, 3}, 1, {2, 2}, {}, {}, "SAME_LOWER"},
      {"conv1d", {2, 2, 9}, {3, 2, 3}, 1, {2}, {2, 1}, {2}},
      {"large_image", {2, 1, 18, 18}, {2, 1, 3, 3}},  // 256 output pixels: per-image GEMMs
      // dX's one-register rows (col2im, f32): 11 rows (groups of four, even rows first), pads on every side.
      {"odd_rows_pads", {2, 3, 12, 11}, {4, 3, 3, 5}, 1, {}, {1, 2, 0, 1}},
      // One input channel per group: dW from the direct kernel (f32), dX from the GEMM path.
      {"one_channel_pads_dilations", {2, 1, 9, 11}, {3, 1, 3, 3}, 1, {2, 1}, {1, 2, 0, 1}, {1, 2}},
      {"one_channel_wide_rows", {1, 1, 3, 41}, {2, 1, 2, 5}},
      {"depthwise", {2, 3, 6, 7}, {3, 1, 3, 3}, 3, {}, {1, 1, 1, 1}},
  };
  int seed = 200;
  for (const ConvCase& c : cases) {
    Tensor x = random_f64(c.x, seed++), w = random_f64(c.w, seed++), b = random_f64({c.w[0]}, seed++);
    const Attrs at = attrs_of(c);
    auto conv = [&](const std::vector<Tensor>& in) { return run_node("Conv", in, at)[0]; };
    Tensor y = conv({x, w, b});
    Tensor dy = random_f64(y.shape(), seed++);
    for (int threads : {1, 2}) {
      auto g = run_node_ex("ConvGrad", {dy, x, w}, at, {true, true, true}, threads, 17, "ai.graphrun");
      EXPECT_LT(max_rel_diff(g[0], numeric_gradient(conv, {x, w, b}, 0, dy)), 1e-8) << c.name << " dX";
      EXPECT_LT(max_rel_diff(g[1], numeric_gradient(conv, {x, w, b}, 1, dy)), 1e-8) << c.name << " dW";
      EXPECT_LT(max_rel_diff(g[2], numeric_gradient(conv, {x, w, b}, 2, dy)), 1e-8) << c.name << " dB";
      // The f32 kernels (their own vectorised paths) agree with the checked f64 ones.
      auto g32 = run_node_ex("ConvGrad", {to_f32(dy), to_f32(x), to_f32(w)}, at, {true, true, true}, threads, 17,
                             "ai.graphrun");
      for (int i = 0; i < 3; ++i) EXPECT_LT(max_rel_diff(g32[i], g[i]), 1e-5) << c.name << " f32 output " << i;
    }
  }
}

// Absent outputs are skipped; the present ones are unchanged; many images over 2 threads agree with 1.
TEST(ConvGrad, AbsentOutputsAndThreadsGiveTheSameNumbers) {
  Tensor x = random_tensor({37, 20, 13, 13}, 1), w = random_tensor({50, 20, 5, 5}, 2);
  Tensor dy = random_tensor({37, 50, 9, 9}, 3);
  auto all = run_node_ex("ConvGrad", {dy, x, w}, {}, {true, true, true}, 1, 17, "ai.graphrun");
  auto two = run_node_ex("ConvGrad", {dy, x, w}, {}, {true, true, true}, 2, 17, "ai.graphrun");
  for (int i = 0; i < 3; ++i) EXPECT_LT(max_rel_diff(two[i], all[i]), 1e-5) << i;
  auto only_dw = run_node_ex("ConvGrad", {dy, x, w}, {}, {false, true, false}, 2, 17, "ai.graphrun");
  EXPECT_FALSE(only_dw[0].defined());
  EXPECT_LT(max_rel_diff(only_dw[1], all[1]), 1e-5);
  auto only_dx = run_node_ex("ConvGrad", {dy, x, w}, {}, {true, false, false}, 1, 17, "ai.graphrun");
  EXPECT_LT(max_rel_diff(only_dx[0], all[0]), 1e-6);
}

// An empty batch: an empty dX, and zero dW and dB (sums over no images), on the GEMM path and the
// direct one (one input channel).
TEST(ConvGrad, EmptyBatchGivesZeroWeightAndBiasGradients) {
  for (const auto& [xs, ws, ys] : std::vector<std::array<Shape, 3>>{{Shape{0, 2, 20, 20}, Shape{3, 2, 3, 3}, Shape{0, 3, 18, 18}},
                                                                    {Shape{0, 1, 28, 28}, Shape{20, 1, 3, 3}, Shape{0, 20, 26, 26}}}) {
    Tensor x = random_tensor(xs, 1), w = random_tensor(ws, 2), dy = random_tensor(ys, 3);
    for (int threads : {1, 2}) {
      auto g = run_node_ex("ConvGrad", {dy, x, w}, {}, {true, true, true}, threads, 17, "ai.graphrun");
      EXPECT_EQ(g[0].shape(), xs);
      ASSERT_EQ(g[1].shape(), ws);
      ASSERT_EQ(g[2].shape(), (Shape{ws[0]}));
      for (double v : g[1].as_doubles()) ASSERT_EQ(v, 0.0);
      for (double v : g[2].as_doubles()) ASSERT_EQ(v, 0.0);
    }
  }
}

// On the GEMM path each thread sums the weight gradient of its chunks of images privately, and the
// sums are added in thread order: which chunks a thread takes must not depend on timing, or the bits of
// dW change from call to call (they did, with chunks dealt out dynamically). A busy thread beside the
// kernel shifts the timing the way a loaded machine does.
TEST(ConvGrad, GemmPathWeightGradientRepeatsBitForBitOnTwoThreads) {
  Tensor x = random_tensor({256, 8, 12, 12}, 1), w = random_tensor({16, 8, 3, 3}, 2);
  Tensor dy = random_tensor({256, 16, 10, 10}, 3);
  auto run = [&] { return run_node_ex("ConvGrad", {dy, x, w}, {}, {false, true, false}, 2, 17, "ai.graphrun")[1]; };
  const Tensor first = run();
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    volatile double v = 1;
    while (!stop) v = v * 1.0000001;
  });
  int differ = 0;
  for (int i = 0; i < 40; ++i) differ += std::memcmp(first.raw(), run().raw(), first.nbytes()) != 0;
  stop = true;
  busy.join();
  EXPECT_EQ(differ, 0) << differ << " of 40 calls gave other bits than the first";
}

// The direct kernels (one input channel, few taps) reduce every output and weight on one thread in a
// fixed order: the bits do not depend on the thread count, and repeat from call to call.
TEST(ConvGrad, DirectKernelsGiveTheSameBitsOnAnyThreadCount) {
  Tensor x = random_tensor({37, 1, 28, 28}, 1), w = random_tensor({20, 1, 3, 3}, 2), b = random_tensor({20}, 3);
  Tensor dy = random_tensor({37, 20, 26, 26}, 4);
  auto same = [](const Tensor& a, const Tensor& b) { return std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0; };
  const Tensor y1 = run_node_ex("Conv", {x, w, b}, {}, {true}, 1)[0];
  const Tensor dw1 = run_node_ex("ConvGrad", {dy, x, w}, {}, {false, true, false}, 1, 17, "ai.graphrun")[1];
  for (int threads : {1, 2, 3}) {
    EXPECT_TRUE(same(y1, run_node_ex("Conv", {x, w, b}, {}, {true}, threads)[0])) << threads;
    EXPECT_TRUE(same(dw1, run_node_ex("ConvGrad", {dy, x, w}, {}, {false, true, false}, threads, 17, "ai.graphrun")[1]))
        << threads;
  }
}

TEST(ConvTransposeGrad, MatchesCentralDifferencesOfConvTranspose) {
  const std::vector<ConvCase> cases = {
      {"stride_pads_outpad", {2, 2, 3, 4}, {2, 2, 3, 2}, 1, {2, 3}, {1, 0, 0, 1}, {}, "", true, {1, 2}},
      {"group_dilation", {1, 4, 3, 3}, {4, 1, 2, 3}, 2, {2, 1}, {}, {1, 2}},
  };
  int seed = 300;
  for (const ConvCase& c : cases) {
    Tensor x = random_f64(c.x, seed++), w = random_f64(c.w, seed++), b = random_f64({c.w[1] * c.group}, seed++);
    const Attrs at = attrs_of(c);
    auto convt = [&](const std::vector<Tensor>& in) { return run_node("ConvTranspose", in, at)[0]; };
    Tensor y = convt({x, w, b});
    Tensor dy = random_f64(y.shape(), seed++);
    auto g = run_node_ex("ConvTransposeGrad", {dy, x, w}, at, {true, true, true}, 1, 17, "ai.graphrun");
    EXPECT_LT(max_rel_diff(g[0], numeric_gradient(convt, {x, w, b}, 0, dy)), 1e-8) << c.name << " dX";
    EXPECT_LT(max_rel_diff(g[1], numeric_gradient(convt, {x, w, b}, 1, dy)), 1e-8) << c.name << " dW";
    EXPECT_LT(max_rel_diff(g[2], numeric_gradient(convt, {x, w, b}, 2, dy)), 1e-8) << c.name << " dB";
  }
}

// The example of ONNX's own test_convtranspose_autopad_same: SAME_UPPER puts the odd padding at the end.
TEST(ConvTranspose, AutoPadSameUpperMatchesOnnxExample) {
  std::vector<float> xv(9);
  for (int i = 0; i < 9; ++i) xv[i] = static_cast<float>(i);
  Tensor x = Tensor::from_vector<float>({1, 1, 3, 3}, xv);
  Tensor w = Tensor::from_vector<float>({1, 2, 3, 3}, std::vector<float>(18, 1.f));
  const std::vector<float> plane = {0, 0, 1, 1, 3, 2, 0, 0, 1, 1, 3, 2, 3, 3, 8, 5, 12, 7,
                                    3, 3, 7, 4, 9, 5, 9, 9, 20, 11, 24, 13, 6, 6, 13, 7, 15, 8};
  std::vector<float> want = plane;
  want.insert(want.end(), plane.begin(), plane.end());
  Tensor y = run_node("ConvTranspose", {x, w}, {{"auto_pad", str("SAME_UPPER")}, {"strides", ints({2, 2})}})[0];
  EXPECT_EQ(max_abs_diff(y, Tensor::from_vector<float>({1, 2, 6, 6}, want)), 0);
}

void expect_error(const std::string& op, const std::vector<Tensor>& in, const Attrs& at, const std::string& part) {
  try {
    run_node(op, in, at);
    ADD_FAILURE() << op << ": expected an error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Conv, BadShapesAndAttributesGiveClearErrors) {
  Tensor x = random_tensor({1, 3, 5, 5}, 1);
  expect_error("Conv", {x, random_tensor({2, 2, 3, 3}, 2)}, {}, "channels");
  expect_error("Conv", {x, random_tensor({2, 3, 7, 7}, 2)}, {}, "smaller than the kernel");
  expect_error("Conv", {x, random_tensor({2, 3, 3, 3}, 2)}, {{"strides", ints({0, 1})}}, "strides");
  expect_error("Conv", {x, random_tensor({2, 3, 3, 3}, 2)}, {{"pads", ints({1, 1})}}, "pads");
  expect_error("Conv", {x, random_tensor({2, 3, 3, 3}, 2)}, {{"auto_pad", str("SAME")}}, "auto_pad");
  expect_error("Conv", {x, random_tensor({2, 3, 3, 3}, 2), random_tensor({3}, 3)}, {}, "B");
  expect_error("Conv", {x, random_tensor({4, 1, 3, 3}, 2)}, {{"group", int1(2)}}, "channels");
  expect_error("Conv", {x, random_tensor({2, 3, 3}, 2)}, {}, "rank");
  expect_error("Conv", {random_int_tensor({1, 3, 5, 5}, 1, 0, 3), random_tensor({2, 3, 3, 3}, 2)}, {}, "f32 or f64");
}

}  // namespace
}  // namespace graphrun::testing
