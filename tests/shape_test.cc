// Shape-family CPU kernels against numpy (evaluated at test time) and naive references: Reshape,
// Flatten, Transpose, Concat, Split, Slice, Squeeze/Unsqueeze, Pad, Gather*, Scatter, Expand, Tile,
// Constant*, Shape/Size, Range, OneHot and ai.graphrun SumToShape and SliceGrad, with their opset differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>

#include "graph/slice_layout.h"
#include "tests/math_test_util.h"

namespace graphrun {
namespace {

using mathtest::as_f64;
using mathtest::expect_close;
using mathtest::expect_error;
using mathtest::i64s;
using mathtest::make;
using mathtest::numpy_eval;
using mathtest::py_sin;
using mathtest::rand;
using mathtest::run_op;
using mathtest::sin_tensor;

const int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(Shape, ReshapeCopiesZerosAndInfersMinusOne) {
  Tensor x = sin_tensor({2, 3, 4});
  Tensor y = run_op("Reshape", {x, i64s({0, -1})})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(testing::max_abs_diff(y.reshaped({2, 3, 4}), x), 0.0);
  EXPECT_EQ(run_op("Reshape", {x, i64s({-1, 0, 2})})[0].shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(run_op("Reshape", {x, i64s({4, 0, 2})})[0].shape(), (Shape{4, 3, 2}));
  // allowzero=1 (opset 14): a 0 is a real zero dimension.
  Tensor e = sin_tensor({0, 3});
  EXPECT_EQ(run_op("Reshape", {e, i64s({3, 0})}, {{"allowzero", Attribute::Int(1)}})[0].shape(), (Shape{3, 0}));
  expect_error([&] { run_op("Reshape", {x, i64s({5, -1})}); }, {"[2,3,4]", "[5,-1]"});
  expect_error([&] { run_op("Reshape", {x, i64s({-1, -1})}); }, {"more than one -1"});
  expect_error([&] { run_op("Reshape", {x, i64s({7, 2})}); }, {"cannot reshape"});
}

TEST(Shape, FlattenSqueezeUnsqueezeInBothOpsetForms) {
  Tensor x = sin_tensor({2, 3, 4, 5});
  EXPECT_EQ(run_op("Flatten", {x})[0].shape(), (Shape{2, 60}));
  EXPECT_EQ(run_op("Flatten", {x}, {{"axis", Attribute::Int(0)}})[0].shape(), (Shape{1, 120}));
  EXPECT_EQ(run_op("Flatten", {x}, {{"axis", Attribute::Int(-1)}})[0].shape(), (Shape{24, 5}));
  EXPECT_EQ(run_op("Flatten", {x}, {{"axis", Attribute::Int(4)}})[0].shape(), (Shape{120, 1}));
  Tensor s = sin_tensor({1, 3, 1, 5});
  EXPECT_EQ(run_op("Squeeze", {s})[0].shape(), (Shape{3, 5}));
  EXPECT_EQ(run_op("Squeeze", {s, i64s({-2})})[0].shape(), (Shape{1, 3, 5}));
  EXPECT_EQ(run_op("Squeeze", {s}, {{"axes", Attribute::Ints({0})}}, 1, 11)[0].shape(), (Shape{3, 1, 5}));
  expect_error([&] { run_op("Squeeze", {s, i64s({1})}); }, {"axis 1", "not 1"});
  Tensor u = sin_tensor({3, 4});
  EXPECT_EQ(run_op("Unsqueeze", {u, i64s({0, 3})})[0].shape(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(run_op("Unsqueeze", {u, i64s({-1})})[0].shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(run_op("Unsqueeze", {u}, {{"axes", Attribute::Ints({1})}}, 1, 11)[0].shape(), (Shape{3, 1, 4}));
  Tensor uu = run_op("Unsqueeze", {u, i64s({2, 0})})[0];
  EXPECT_EQ(uu.shape(), (Shape{1, 3, 1, 4}));
  EXPECT_EQ(testing::max_abs_diff(uu.reshaped({3, 4}), u), 0.0);
}

// Transposes that move the innermost axis are copied in tiles (runtime/kernels/cpu/shape.cc): shapes with
// partial tiles at both edges, batch axes around the plane, every element size, against the index rule.
TEST(Shape, TransposesOfTheInnermostAxisAreEveryElementInItsPlace) {
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  const std::vector<Case> cases = {{{37, 70}, {1, 0}},           {{512, 128}, {1, 0}},
                                   {{3, 33, 65}, {0, 2, 1}},     {{2, 64, 4, 32}, {0, 2, 3, 1}},
                                   {{5, 7, 40, 3}, {3, 1, 0, 2}}, {{4, 1, 50, 2}, {2, 1, 3, 0}},
                                   {{64, 3, 35}, {2, 0, 1}},     {{1, 45}, {1, 0}},
                                   // AVX2's 8x16 blocks, with and without remainders on either side, and the
                                   // power-of-two strides of attention's head splits.
                                   {{64, 64, 32}, {1, 2, 0}},    {{13, 37, 29}, {1, 2, 0}},
                                   {{16, 8}, {1, 0}},            {{9, 17}, {1, 0}},
                                   {{2, 24, 40}, {0, 2, 1}},     {{3, 7, 8, 16}, {0, 3, 1, 2}}};
  for (const Case& c : cases)
    for (DType dt : {DType::F32, DType::I32, DType::F64, DType::I64, DType::U8, DType::F16}) {
      const int64_t n = shape_numel(c.shape);
      Tensor x(dt, c.shape);
      auto* xb = static_cast<unsigned char*>(x.raw());
      for (size_t b = 0; b < x.nbytes(); ++b) xb[b] = static_cast<unsigned char>(b * 7 + b / 251);
      const Tensor y = run_op("Transpose", {x}, {{"perm", Attribute::Ints(c.perm)}})[0];
      const int r = static_cast<int>(c.shape.size());
      ASSERT_EQ(y.numel(), n);
      const size_t es = dtype_size(dt);
      std::vector<int64_t> xs(r, 1), idx(r);
      for (int k = r - 1; k > 0; --k) xs[k - 1] = xs[k] * c.shape[k];
      int64_t bad = 0;
      for (int64_t o = 0; o < n; ++o) {
        int64_t rem = o, src = 0;
        for (int k = r - 1; k >= 0; --k) {
          const int64_t d = y.shape()[k];
          src += (rem % d) * xs[c.perm[k]];
          rem /= d;
        }
        bad += std::memcmp(static_cast<const char*>(y.raw()) + o * es, xb + src * es, es) != 0;
      }
      EXPECT_EQ(bad, 0) << shape_str(c.shape) << " perm " << shape_str(c.perm) << " " << dtype_name(dt);
    }
}

TEST(Shape, TransposeConcatSplitMatchNumpy) {
  Tensor x = sin_tensor({2, 3, 4});
  std::string px = py_sin({2, 3, 4});
  auto want = numpy_eval({"np.transpose(" + px + ")", "np.transpose(" + px + ", (1, 0, 2))",
                          "np.transpose(" + px + ", (2, 0, 1))",
                          "np.concatenate([" + px + ", " + py_sin({2, 1, 4}, 2) + ", " + py_sin({2, 2, 4}, 3) + "], axis=-2)",
                          "np.concatenate([" + px + ", " + px + "], axis=0)"},
                         "transpose");
  ASSERT_EQ(want.size(), 5u);
  expect_close(run_op("Transpose", {x})[0], want[0], 0);
  expect_close(run_op("Transpose", {x}, {{"perm", Attribute::Ints({1, 0, 2})}})[0], want[1], 0);
  expect_close(run_op("Transpose", {x}, {{"perm", Attribute::Ints({2, 0, 1})}})[0], want[2], 0);
  // f32 and i64 move through the same byte-wise code.
  expect_close(as_f64(run_op("Transpose", {make(DType::F32, x.shape(), x.as_doubles())}, {{"perm", Attribute::Ints({2, 0, 1})}})[0]),
               make(DType::F64, want[2].shape(), make(DType::F32, want[2].shape(), want[2].as_doubles()).as_doubles()), 0);
  expect_close(run_op("Concat", {x, sin_tensor({2, 1, 4}, 2), sin_tensor({2, 2, 4}, 3)}, {{"axis", Attribute::Int(-2)}})[0],
               want[3], 0);
  expect_close(run_op("Concat", {x, x}, {{"axis", Attribute::Int(0)}})[0], want[4], 0);
  expect_error([&] { run_op("Concat", {x, sin_tensor({2, 3, 5})}, {{"axis", Attribute::Int(1)}}); }, {"[2,3,4]", "[2,3,5]"});

  // Split: equal parts, sizes as an attribute (opset 11) and as an input (opset 13).
  auto parts = run_op("Split", {x}, {{"axis", Attribute::Int(2)}}, 2);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 3, 2}));
  Tensor joined = run_op("Concat", {parts[0], parts[1]}, {{"axis", Attribute::Int(2)}})[0];
  EXPECT_EQ(testing::max_abs_diff(joined, x), 0.0);
  auto p11 = run_op("Split", {x}, {{"axis", Attribute::Int(1)}, {"split", Attribute::Ints({1, 2})}}, 2, 11);
  auto p13 = run_op("Split", {x, i64s({1, 2})}, {{"axis", Attribute::Int(-2)}}, 2, 13);
  EXPECT_EQ(p11[1].shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(testing::max_abs_diff(p11[1], p13[1]), 0.0);
  EXPECT_EQ(testing::max_abs_diff(run_op("Concat", {p13[0], p13[1]}, {{"axis", Attribute::Int(1)}})[0], x), 0.0);
  expect_error([&] { run_op("Split", {x}, {{"axis", Attribute::Int(1)}}, 2); }, {"equal"});
  expect_error([&] { run_op("Split", {x, i64s({1, 1})}, {{"axis", Attribute::Int(1)}}, 2); }, {"add up"});
}

TEST(Shape, SliceMatchesNumpyWithNegativeStepsAndClamping) {
  Tensor x = sin_tensor({4, 5, 6});
  std::string px = py_sin({4, 5, 6});
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
    std::string np;
  };
  const std::vector<Case> cases = {
      {{1, 0}, {3, 5}, {0, 1}, {1, 1}, "[1:3, 0:5]"},
      {{0}, {-1}, {}, {}, "[0:-1]"},
      {{-3}, {kMax}, {2}, {1}, "[:, :, -3:]"},
      {{5}, {-kMax}, {2}, {-1}, "[:, :, ::-1]"},
      {{-1, 4}, {-kMax, 0}, {0, -1}, {-2, -3}, "[::-2, :, 4:0:-3]"},
      {{20}, {1}, {1}, {-2}, "[:, 20:1:-2]"},
      {{2}, {2}, {1}, {1}, "[:, 2:2]"},
      {{-100}, {100}, {0}, {3}, "[-100:100:3]"},
      {{1, 1}, {1000, 4}, {2, 1}, {2, 1}, "[:, 1:4, 1:1000:2]"},
  };
  std::vector<std::string> exprs;
  for (const auto& c : cases) exprs.push_back(px + c.np);
  auto want = numpy_eval(exprs, "slice");
  ASSERT_EQ(want.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    std::vector<Tensor> in = {x, i64s(c.starts), i64s(c.ends), c.axes.empty() ? Tensor() : i64s(c.axes),
                              c.steps.empty() ? Tensor() : i64s(c.steps)};
    expect_close(run_op("Slice", in)[0], want[i], 0, "Slice " + c.np);
  }
  // Opset 9: attributes, no steps.
  expect_close(run_op("Slice", {x}, {{"starts", Attribute::Ints({1, 0})}, {"ends", Attribute::Ints({3, 5})},
                                     {"axes", Attribute::Ints({0, 1})}}, 1, 9)[0],
               want[0], 0);
  expect_error([&] { run_op("Slice", {x, i64s({0}), i64s({1}), i64s({0}), i64s({0})}); }, {"step 0"});
}

// ai.graphrun SliceGrad: zeros of X's shape with dY written where Slice takes its elements, against numpy's
// `z[slice] = dy` for the slices above, in f64 and f32, int32 bounds too.
TEST(Shape, SliceGradWritesWhereSliceTakesMatchesNumpy) {
  const Shape xs = {4, 5, 6};
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
    std::string np;
  };
  const std::vector<Case> cases = {
      {{1, 0}, {3, 5}, {0, 1}, {1, 1}, "1:3, 0:5"},
      {{0}, {-1}, {}, {}, "0:-1"},
      {{-3}, {kMax}, {2}, {1}, ":, :, -3:"},
      {{5}, {-kMax}, {2}, {-1}, ":, :, ::-1"},
      {{-1, 4}, {-kMax, 0}, {0, -1}, {-2, -3}, "::-2, :, 4:0:-3"},
      {{20}, {1}, {1}, {-2}, ":, 20:1:-2"},
      {{2}, {2}, {1}, {1}, ":, 2:2"},
      {{-100}, {100}, {0}, {3}, "-100:100:3"},
      {{1, 1}, {1000, 4}, {2, 1}, {2, 1}, ":, 1:4, 1:1000:2"},
      {{3, -1}, {0, -7}, {}, {-2, -1}, "3:0:-2, -1:-7:-1"},
  };
  const std::string prelude =
      "def unslice(shape, idx):\n"
      "    z = np.zeros(shape)\n"
      "    z[idx] = np.array([math.sin(i + 1) for i in range(z[idx].size)], dtype=np.float64).reshape(z[idx].shape)\n"
      "    return z\n";
  std::vector<std::string> exprs;
  for (const auto& c : cases) {
    exprs.push_back("np.zeros((4, 5, 6))[" + c.np + "]");
    exprs.push_back("unslice((4, 5, 6), np.s_[" + c.np + "])");
  }
  auto want = numpy_eval(exprs, "slice_grad", prelude);
  ASSERT_EQ(want.size(), 2 * cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const Tensor dy = sin_tensor(want[2 * i].shape());
    for (DType dt : {DType::F64, DType::F32}) {
      std::vector<Tensor> in = {make(dt, dy.shape(), dy.as_doubles()), i64s(xs), i64s(c.starts), i64s(c.ends),
                                c.axes.empty() ? Tensor() : i64s(c.axes), c.steps.empty() ? Tensor() : i64s(c.steps)};
      while (!in.back().defined()) in.pop_back();
      if (dt == DType::F32)  // int32 bounds, as Slice allows
        for (size_t k = 2; k < in.size(); ++k)
          if (in[k].defined()) {
            std::vector<int32_t> v;
            for (int64_t e : in[k].as_int64s()) v.push_back(static_cast<int32_t>(std::clamp<int64_t>(e, INT32_MIN, INT32_MAX)));
            in[k] = Tensor::from_vector<int32_t>(in[k].shape(), v);
          }
      Tensor got = run_op("SliceGrad", in, {}, 1, 17, kGraphrunDomain)[0];
      expect_close(got, make(dt, xs, want[2 * i + 1].as_doubles()), 0, "SliceGrad " + c.np + " " + dtype_name(dt));
    }
  }
  expect_error([&] { run_op("SliceGrad", {sin_tensor({4, 5, 2}), i64s(xs), i64s({0}), i64s({3}), i64s({2})}, {}, 1, 17,
                            kGraphrunDomain); },
               {"SliceGrad", "[4,5,2]", "[4,5,3]"});
  expect_error([&] { run_op("SliceGrad", {sin_tensor({4, 5, 6}), i64s(xs), i64s({0}), i64s({3}), i64s({1}), i64s({0})},
                            {}, 1, 17, kGraphrunDomain); },
               {"SliceGrad", "step 0"});
}

// The one index function of Slice, SliceGrad and the Slice rule, at the ONNX spec's edges.
TEST(Shape, SliceRangeClampsAsTheSpecSays) {
  struct Case {
    int64_t dim, start, end, step, first, count;
  };
  const std::vector<Case> cases = {
      {5, 1, 4, 1, 1, 3},     {5, -2, kMax, 1, 3, 2},   {5, -100, 100, 2, 0, 3},  {5, 4, -100, -2, 4, 3},
      {5, 100, -kMax - 1, -1, 4, 5}, {5, -100, 0, -1, 0, 0}, {5, 3, 3, 1, 0, 0}, {0, 0, kMax, 1, 0, 0},
      {0, -1, -kMax - 1, -1, 0, 0}, {5, 0, 5, kMax, 0, 1}, {5, 4, 0, -kMax - 1, 4, 1}, {7, 6, -8, -3, 6, 3},
  };
  for (const auto& c : cases) {
    const SliceRange r = slice_range(c.dim, c.start, c.end, c.step);
    EXPECT_EQ(r.count, c.count) << c.dim << " " << c.start << ":" << c.end << ":" << c.step;
    if (r.count) {
      EXPECT_EQ(r.first, c.first) << c.dim << " " << c.start << ":" << c.end << ":" << c.step;
    }
  }
}

TEST(Shape, PadMatchesNumpyInEveryModeAndBothOpsetForms) {
  Tensor x = sin_tensor({2, 3, 4});
  std::string px = py_sin({2, 3, 4});
  auto want = numpy_eval({"np.pad(" + px + ", ((0, 1), (2, 0), (1, 3)), constant_values=1.5)",
                          "np.pad(" + px + ", ((1, 1), (2, 2), (3, 1)), mode='reflect')",
                          "np.pad(" + px + ", ((1, 0), (0, 2), (2, 3)), mode='edge')",
                          "np.pad(" + px + ", ((0, 0), (0, 1), (0, 0)))[:, 1:, :-2]",
                          "np.pad(" + py_sin({3, 1}) + ", ((0, 0), (2, 3)), mode='reflect')"},
                         "pad");
  ASSERT_EQ(want.size(), 5u);
  auto pad = [&](const Tensor& in, std::vector<int64_t> pads, const std::string& mode, double value) {
    return run_op("Pad", {in, i64s(pads), make(DType::F64, {}, {value})}, {{"mode", Attribute::Str(mode)}})[0];
  };
  expect_close(pad(x, {0, 2, 1, 1, 0, 3}, "constant", 1.5), want[0], 0, "constant");
  expect_close(pad(x, {1, 2, 3, 1, 2, 1}, "reflect", 0), want[1], 0, "reflect");
  expect_close(pad(x, {1, 0, 2, 0, 2, 3}, "edge", 0), want[2], 0, "edge");
  expect_close(pad(x, {0, -1, 0, 0, 1, -2}, "constant", 0), want[3], 0, "negative pads");
  expect_close(pad(sin_tensor({3, 1}), {0, 2, 0, 3}, "reflect", 0), want[4], 0, "reflect of one");
  // Opset 2..10: pads and value are attributes.
  Tensor xf = make(DType::F32, x.shape(), x.as_doubles());
  Tensor a = run_op("Pad", {xf}, {{"pads", Attribute::Ints({0, 2, 1, 1, 0, 3})}, {"value", Attribute::Float(1.5f)}}, 1, 10)[0];
  expect_close(as_f64(a), make(DType::F64, want[0].shape(), make(DType::F32, want[0].shape(), want[0].as_doubles()).as_doubles()), 0);
  // constant_value absent: zeros.
  Tensor z = run_op("Pad", {make(DType::I64, {2}, {7, 8}), i64s({1, 2})})[0];
  expect_close(z, make(DType::I64, {5}, {0, 7, 8, 0, 0}), 0);
  expect_error([&] { run_op("Pad", {x, i64s({1, 1})}); }, {"2 pads", "[2,3,4]"});
  expect_error([&] { pad(x, {0, 0, 0, 0, 0, 0}, "wrap", 0); }, {"wrap"});
}

TEST(Shape, ConstantShapeSizeConstantOfShapeRange) {
  Tensor v = sin_tensor({2, 2});
  expect_close(run_op("Constant", {}, {{"value", Attribute::Tens(v)}})[0], v, 0);
  expect_close(run_op("Constant", {}, {{"value_float", Attribute::Float(2.5f)}})[0], make(DType::F32, {}, {2.5}), 0);
  expect_close(run_op("Constant", {}, {{"value_ints", Attribute::Ints({1, 2, 3})}})[0], i64s({1, 2, 3}), 0);
  expect_close(run_op("Constant", {}, {{"value_int", Attribute::Int(-4)}})[0], make(DType::I64, {}, {-4}), 0);
  expect_close(run_op("Constant", {}, {{"value_floats", Attribute::Floats({1, 2})}})[0], make(DType::F32, {2}, {1, 2}), 0);
  Tensor x = sin_tensor({2, 3, 4, 5});
  expect_close(run_op("Shape", {x})[0], i64s({2, 3, 4, 5}), 0);
  expect_close(run_op("Shape", {x}, {{"start", Attribute::Int(1)}, {"end", Attribute::Int(-1)}})[0], i64s({3, 4}), 0);
  expect_close(run_op("Shape", {x}, {{"start", Attribute::Int(-10)}, {"end", Attribute::Int(10)}})[0], i64s({2, 3, 4, 5}), 0);
  // start/end exist only from opset 15.
  expect_close(run_op("Shape", {x}, {{"start", Attribute::Int(1)}}, 1, 13)[0], i64s({2, 3, 4, 5}), 0);
  expect_close(run_op("Size", {x})[0], make(DType::I64, {}, {120}), 0);
  Tensor c = run_op("ConstantOfShape", {i64s({2, 3})})[0];
  expect_close(c, make(DType::F32, {2, 3}, std::vector<double>(6, 0)), 0);
  c = run_op("ConstantOfShape", {i64s({4})}, {{"value", Attribute::Tens(make(DType::I64, {1}, {7}))}})[0];
  expect_close(c, i64s({7, 7, 7, 7}), 0);
  expect_close(run_op("Range", {make(DType::F32, {}, {1}), make(DType::F32, {}, {2}), make(DType::F32, {}, {0.3})})[0],
               make(DType::F32, {4}, {1, 1.3, 1.6, 1.9}), 1e-6);
  expect_close(run_op("Range", {make(DType::I64, {}, {10}), make(DType::I64, {}, {4}), make(DType::I64, {}, {-3})})[0],
               i64s({10, 7}), 0);
  expect_close(run_op("Range", {make(DType::I32, {}, {1}), make(DType::I32, {}, {0}), make(DType::I32, {}, {1})})[0],
               make(DType::I32, {0}, {}), 0);
}

TEST(Shape, GatherAndFriendsMatchNumpy) {
  Tensor x = sin_tensor({3, 4, 5});
  std::string px = py_sin({3, 4, 5});
  Tensor idx = make(DType::I64, {2, 2}, {0, -1, 2, 1});
  Tensor ge_idx = make(DType::I32, {3, 2, 5}, std::vector<double>(30, 0));
  for (int i = 0; i < 30; ++i) static_cast<int32_t*>(ge_idx.raw())[i] = (i * 7) % 4 - (i % 3 == 0 ? 4 : 0);
  std::string gidx = "((np.arange(30) * 7) % 4 - np.where(np.arange(30) % 3 == 0, 4, 0)).reshape(3, 2, 5)";
  auto want = numpy_eval({"np.take(" + px + ", [[0, -1], [2, 1]], axis=1)", "np.take(" + px + ", 2, axis=0)",
                          "np.take_along_axis(" + px + ", " + gidx + " % 4, axis=1)",
                          "np.broadcast_to(" + py_sin({4, 1}) + ", (2, 4, 3))", "np.tile(" + px + ", (2, 1, 3))"},
                         "gather");
  ASSERT_EQ(want.size(), 5u);
  expect_close(run_op("Gather", {x, idx}, {{"axis", Attribute::Int(-2)}})[0], want[0], 0);
  expect_close(run_op("Gather", {x, make(DType::I64, {}, {2})})[0], want[1], 0);
  expect_error([&] { run_op("Gather", {x, i64s({4})}, {{"axis", Attribute::Int(1)}}); }, {"index 4", "size 4"});
  expect_close(run_op("GatherElements", {x, ge_idx}, {{"axis", Attribute::Int(1)}})[0], want[2], 0);
  expect_close(run_op("Expand", {sin_tensor({4, 1}), i64s({2, 1, 3})})[0], want[3], 0);
  expect_close(run_op("Tile", {x, i64s({2, 1, 3})})[0], want[4], 0);
  expect_error([&] { run_op("Expand", {sin_tensor({4, 2}), i64s({3, 1})}); }, {"[4,2]", "[3,1]"});

  // ScatterElements: none and add, with repeated indices for add (ONNX's example).
  Tensor data = make(DType::F32, {1, 5}, {1, 2, 3, 4, 5});
  Tensor sidx = make(DType::I64, {1, 2}, {1, 1}), upd = make(DType::F32, {1, 2}, {1.1, 2.1});
  expect_close(run_op("ScatterElements", {data, sidx, upd}, {{"axis", Attribute::Int(1)}, {"reduction", Attribute::Str("add")}})[0],
               make(DType::F32, {1, 5}, {1, 5.2, 3, 4, 5}), 1e-6);
  Tensor d2 = make(DType::F32, {3, 3}, std::vector<double>(9, 0));
  Tensor i2 = make(DType::I64, {2, 3}, {1, 0, 2, 0, 2, -2});
  Tensor u2 = make(DType::F32, {2, 3}, {1, 1.1, 1.2, 2, 2.1, 2.2});
  expect_close(run_op("ScatterElements", {d2, i2, u2})[0], make(DType::F32, {3, 3}, {2, 1.1, 0, 1, 0, 2.2, 0, 2.1, 1.2}), 1e-7);

  // OneHot, default axis -1 and axis 0, negative indices count from the end.
  Tensor oh = run_op("OneHot", {make(DType::I64, {3}, {0, -1, 5}), make(DType::I64, {}, {3}), make(DType::F32, {2}, {0, 1})})[0];
  expect_close(oh, make(DType::F32, {3, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 0}), 0);
  oh = run_op("OneHot", {make(DType::I64, {2}, {1, 2}), make(DType::F32, {}, {3}), make(DType::I64, {2}, {-1, 4})},
              {{"axis", Attribute::Int(0)}})[0];
  expect_close(oh, make(DType::I64, {3, 2}, {-1, -1, 4, -1, -1, 4}), 0);
}

TEST(Shape, GatherNdScatterNdTriluEyeLikeDepthToSpaceMatchNumpy) {
  Tensor x = sin_tensor({2, 3, 4});
  std::string px = py_sin({2, 3, 4});
  Tensor x4 = sin_tensor({1, 8, 2, 3});
  std::string p4 = py_sin({1, 8, 2, 3});
  auto want = numpy_eval({px + "[[1, 0], [-1, 2]]", px + "[[0, 1], [1, 2]]",  // GatherND m=2 (pairs (1,-1), (0,2))
                          "np.stack([" + px + "[0][[1, 2]], " + px + "[1][[0, 0]]])",  // batch_dims=1
                          "np.triu(" + px + ", 1)", "np.tril(" + px + ", -1)", "np.eye(3, 4, k=1)",
                          p4 + ".reshape(1, 2, 2, 2, 2, 3).transpose(0, 3, 4, 1, 5, 2).reshape(1, 2, 4, 6)",
                          p4 + ".reshape(1, 2, 2, 2, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(1, 2, 4, 6)"},
                         "gathernd");
  ASSERT_EQ(want.size(), 8u);
  // numpy's x[[1, 0], [-1, 2]] picks (1, -1) and (0, 2); as GatherND indices that is [[1, -1], [0, 2]].
  expect_close(run_op("GatherND", {x, make(DType::I64, {2, 2}, {1, -1, 0, 2})})[0], want[0], 0, "GatherND");
  expect_close(run_op("GatherND", {x, make(DType::I64, {2, 2}, {0, 1, 1, 2})})[0], want[1], 0, "GatherND 2");
  expect_close(run_op("GatherND", {x, make(DType::I64, {2, 2, 1}, {1, 2, 0, 0})}, {{"batch_dims", Attribute::Int(1)}})[0],
               want[2], 0, "GatherND batch_dims");
  Tensor sc = run_op("ScatterND", {x, make(DType::I64, {2, 1}, {1, 0}), sin_tensor({2, 3, 4}, 5)})[0];
  Tensor upd = sin_tensor({2, 3, 4}, 5);
  expect_close(run_op("Slice", {sc, i64s({1}), i64s({2})})[0], run_op("Slice", {upd, i64s({0}), i64s({1})})[0], 0, "ScatterND");
  Tensor add = run_op("ScatterND", {x, make(DType::I64, {2, 2}, {0, 0, 0, 0}), sin_tensor({2, 4}, 1)},
                      {{"reduction", Attribute::Str("add")}})[0];
  EXPECT_NEAR(add.as_doubles()[0], x.as_doubles()[0] + std::sin(1.0) + std::sin(5.0), 1e-12);  // repeats accumulate
  expect_close(run_op("Trilu", {x, make(DType::I64, {}, {1})})[0], want[3], 0, "triu");
  expect_close(run_op("Trilu", {x, make(DType::I64, {}, {-1})}, {{"upper", Attribute::Int(0)}})[0], want[4], 0, "tril");
  expect_close(as_f64(run_op("EyeLike", {make(DType::I32, {3, 4}, std::vector<double>(12, 5))},
                             {{"k", Attribute::Int(1)}, {"dtype", Attribute::Int(1)}})[0]),
               want[5], 0, "EyeLike");
  Tensor d2s = run_op("DepthToSpace", {x4}, {{"blocksize", Attribute::Int(2)}})[0];
  expect_close(d2s, want[6], 0, "DepthToSpace DCR");
  expect_close(run_op("DepthToSpace", {x4}, {{"blocksize", Attribute::Int(2)}, {"mode", Attribute::Str("CRD")}})[0], want[7], 0,
               "DepthToSpace CRD");
  // SpaceToDepth undoes DCR DepthToSpace.
  expect_close(run_op("SpaceToDepth", {d2s}, {{"blocksize", Attribute::Int(2)}})[0], x4, 0, "SpaceToDepth");
  expect_error([&] { run_op("GatherND", {x, make(DType::I64, {1, 2}, {2, 0})}); }, {"index 2", "size 2"});
}

TEST(Shape, CompressNonZeroReverseSequenceMatchNumpy) {
  Tensor x = sin_tensor({3, 4});
  std::string px = py_sin({3, 4});
  auto want = numpy_eval({"np.compress([0, 1, 1], " + px + ", axis=0)", "np.compress([1, 0, 0, 1], " + px + ", axis=-1)",
                          "np.compress([0, 1, 0, 0, 0, 1], " + px + ")", "np.array(np.nonzero(" + px + " > 0.5))",
                          "np.stack([" + px + "[[1, 0, 2], 0], " + px + "[[0, 1, 2], 1], " + px + "[[0, 1, 2], 2], " + px +
                              "[[2, 1, 0], 3]], axis=1)"},
                         "compress");
  ASSERT_EQ(want.size(), 5u);
  expect_close(run_op("Compress", {x, make(DType::Bool, {3}, {0, 1, 1})}, {{"axis", Attribute::Int(0)}})[0], want[0], 0);
  expect_close(run_op("Compress", {x, make(DType::Bool, {4}, {1, 0, 0, 1})}, {{"axis", Attribute::Int(-1)}})[0], want[1], 0);
  expect_close(run_op("Compress", {x, make(DType::Bool, {6}, {0, 1, 0, 0, 0, 1})})[0], want[2], 0);
  Tensor big = run_op("Greater", {x, make(DType::F64, {}, {0.5})})[0];
  expect_close(as_f64(run_op("NonZero", {big})[0]), want[3], 0);
  // Time axis 0, batch axis 1: batch b reverses its first len[b] steps.
  expect_close(run_op("ReverseSequence", {x, i64s({2, 1, 1, 3})})[0], want[4], 0);
}

TEST(Shape, SumToShapeIsTheReverseOfBroadcasting) {
  struct Case {
    Shape x, target;
  };
  const std::vector<Case> cases = {{{6, 128}, {128}},       {{6, 128}, {1, 128}},     {{2, 5, 3, 3}, {5, 1, 1}},
                                   {{2, 5, 3, 3}, {}},       {{2, 3, 4}, {2, 3, 4}},   {{2, 3, 4}, {2, 1, 4}},
                                   {{4, 1, 3}, {1, 3}},      {{5, 3, 4, 6}, {3, 1, 6}}, {{0, 3}, {3}}};
  for (DType dt : {DType::F32, DType::F64})
    for (const auto& c : cases) {
      Tensor x = rand(dt, c.x, 7);
      // Naive: every element of X adds into the target element broadcasting maps to it.
      std::vector<double> want(shape_numel(c.target), 0.0);
      auto vx = x.as_doubles();
      for (int64_t i = 0; i < x.numel(); ++i) want[mathtest::broadcast_source(mathtest::unravel(i, c.x), c.target)] += vx[i];
      Tensor got = run_op("SumToShape", {x, i64s(c.target)}, {}, 1, 17, kGraphrunDomain)[0];
      expect_close(got, make(dt, c.target, want), dt == DType::F32 ? 1e-5 : 1e-12,
                   shape_str(c.x) + " -> " + shape_str(c.target));
    }
  expect_close(run_op("SumToShape", {make(DType::I64, {2, 2}, {1, 2, 3, 4}), i64s({2})}, {}, 1, 17, kGraphrunDomain)[0],
               i64s({4, 6}), 0);
  expect_error([] { run_op("SumToShape", {rand(DType::F32, {2, 3}, 1), i64s({2})}, {}, 1, 17, kGraphrunDomain); },
               {"[2]", "[2,3]"});
}

}  // namespace
}  // namespace graphrun
