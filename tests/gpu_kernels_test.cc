// CUDA backend: every CUDA kernel against the CPU kernel on random data (the same cases also run on the
// simulated device, and every op with a CUDA kernel must have a CPU reference and a case), a hand-built
// training step on cuda:0 against the CPU, the device-local reduction of replicas sharing a GPU, and the
// clear errors of machines without one. GPU tests skip, saying why, where graphrun has no usable GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include "graph/onnx_io.h"
#include "graph/op_table.h"
#include "graph/passes/remove_noops.h"
#include "graph/passes/train_mode.h"
#include "runtime/comm/communicator.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/interrupt.h"
#include "runtime/trainer.h"
#include "tests/sim_backend.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using runtime::ExecOptions;
using runtime::Executor;
using testing::random_int_tensor;
using testing::random_tensor;

const Device kGpu{Device::Kind::CUDA, 0};
const Device kCpu{};

// cuBLAS is opened on first use, not at start: linking it cost every graphrun process most of a
// second, GPU or not (runtime/cuda/cublas_loader.cc). Needs no device; skips in a build without CUDA.
bool maps_hold(const std::string& part) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(part) != std::string::npos) return true;
  return false;
}

TEST(CublasLoader, OpensCuBlasOnFirstUseOnly) {
  std::string why;
  if (!runtime::builtin_cuda_available(&why) && why.find("built without CUDA") != std::string::npos)
    GTEST_SKIP() << why;
  EXPECT_FALSE(maps_hold("libcublas")) << "libcublas is loaded before graphrun asked for it";
  ASSERT_TRUE(runtime::cublas_loadable(&why)) << why;
  EXPECT_TRUE(maps_hold("libcublas"));
}

// Skips the test, saying why, unless a CUDA device can run kernels here.
#define REQUIRE_GPU()                                                                    \
  do {                                                                                   \
    std::string why_;                                                                    \
    if (!runtime::cuda_available(&why_)) GTEST_SKIP() << "needs a CUDA GPU: " << why_;   \
  } while (0)

Tensor bool_tensor(const Shape& shape, uint64_t seed) {
  Tensor r = random_int_tensor(shape, seed, 0, 2);
  Tensor b(DType::Bool, shape);
  auto* p = static_cast<uint8_t*>(b.raw());
  const int64_t* v = r.data<int64_t>();
  for (int64_t i = 0; i < b.numel(); ++i) p[i] = static_cast<uint8_t>(v[i]);
  return b;
}

Tensor i64(Shape shape, std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(std::move(shape), v); }

Tensor bool_scalar(bool v) {
  Tensor b(DType::Bool, {});
  *static_cast<uint8_t*>(b.raw()) = v ? 1 : 0;
  return b;
}

struct OneNode {
  Graph graph;
  std::map<std::string, Tensor> feeds;
};

OneNode one_node(const std::string& op, const std::vector<Tensor>& inputs, const std::map<std::string, Attribute>& attrs,
                 int num_outputs, int64_t opset, const std::string& domain) {
  OneNode r;
  r.graph = testing::single_node_graph(op, inputs, attrs, num_outputs, opset, domain, r.feeds);
  r.graph.name = op + "_gpu_test";
  return r;
}

// Runs `runs` times (the first run plans, later ones use the planned arena); returns every run's outputs on the host.
std::vector<std::vector<Tensor>> run_on(const Graph& g, const std::map<std::string, Tensor>& feeds, Device dev, int runs) {
  ExecOptions o;
  o.device = dev;
  Executor ex(g, o);
  std::vector<std::vector<Tensor>> all;
  for (int r = 0; r < runs; ++r) {
    auto out = ex.run(feeds);
    std::vector<Tensor> v;
    for (const auto& name : g.outputs) v.push_back(runtime::to_host(out.at(name)));
    all.push_back(v);
  }
  return all;
}

double diff(const Tensor& gpu, const Tensor& cpu) {
  EXPECT_EQ(gpu.dtype(), cpu.dtype());
  EXPECT_EQ(shape_str(gpu.shape()), shape_str(cpu.shape()));
  if (gpu.dtype() != cpu.dtype() || gpu.shape() != cpu.shape()) return INFINITY;
  return testing::max_rel_diff(gpu, cpu);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
}

// ---- kernel cases: one node on the CPU and on cuda:0 ----

// One node: op, inputs, attributes, and how close the device must come to the CPU (relative to the
// output's scale).
struct KernelCase {
  std::string op;
  std::vector<Tensor> inputs;
  std::map<std::string, Attribute> attrs;
  int num_outputs = 1;
  double tol = 1e-5;
  int64_t opset = 17;
  std::string domain;
  std::string key() const { return domain.empty() ? op : domain + "::" + op; }
};

// A group of cases (the GpuKernels test of that name runs it).
struct Cases {
  std::vector<KernelCase> all;
  void add(const std::string& op, const std::vector<Tensor>& inputs, const std::map<std::string, Attribute>& attrs = {},
           int num_outputs = 1, double tol = 1e-5, int64_t opset = 17, const std::string& domain = "") {
    all.push_back({op, inputs, attrs, num_outputs, tol, opset, domain});
  }
};
using CaseGroup = void (*)(Cases&);

// The CUDA kernel of the case's op against the CPU kernel: both runs on the device (planning and
// planned) must match the CPU within the case's tolerance, or bit for bit. A missing CPU reference
// is a failure: the CPU kernels are the reference of every device.
void expect_parity(const KernelCase& c, bool bitwise = false) {
  OneNode t = one_node(c.op, c.inputs, c.attrs, c.num_outputs, c.opset, c.domain);
  if (!runtime::cpu_kernels().find(t.graph.nodes[0])) {
    ADD_FAILURE() << c.key() << " has no CPU reference kernel (runtime/kernels/cpu/): nothing to compare its CUDA kernel with";
    return;
  }
  auto cpu = run_on(t.graph, t.feeds, kCpu, 1)[0];
  auto dev = run_on(t.graph, t.feeds, kGpu, 2);
  for (int run = 0; run < 2; ++run)
    for (int i = 0; i < c.num_outputs; ++i) {
      const std::string what = c.key() + " output " + std::to_string(i) + " (run " + std::to_string(run) + "): device " +
                               dev[run][i].str() + " vs cpu " + cpu[i].str();
      if (bitwise) EXPECT_TRUE(bitwise_equal(dev[run][i], cpu[i])) << what;
      else EXPECT_LE(diff(dev[run][i], cpu[i]), c.tol) << what;
    }
}

void expect_group_on_gpu(CaseGroup group) {
  std::string why;
  if (!runtime::cuda_available(&why)) GTEST_SKIP() << "needs a CUDA GPU: " << why;
  Cases cs;
  group(cs);
  for (const KernelCase& c : cs.all) expect_parity(c);
}

std::map<std::string, Attribute> ints(const std::string& k, std::vector<int64_t> v) { return {{k, Attribute::Ints(std::move(v))}}; }

// Bad input on the GPU is an Error naming the node and saying why (never a crash, never silence).
void expect_gpu_error(const std::string& op, const std::vector<Tensor>& inputs, const std::map<std::string, Attribute>& attrs,
                      const std::string& want, int num_outputs = 1, int64_t opset = 17, const std::string& domain = "") {
  OneNode t = one_node(op, inputs, attrs, num_outputs, opset, domain);
  try {
    run_on(t.graph, t.feeds, kGpu, 1);
    ADD_FAILURE() << op << ": expected an error containing '" << want << "'";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_NE(m.find(t.graph.nodes[0].name), std::string::npos) << m;
  }
}

// ---- what a machine without a GPU says ----

TEST(CudaAvailability, ReasonIsOneClearLine) {
  std::string why;
  bool ok = runtime::cuda_available(&why);
  if (ok) {
    EXPECT_TRUE(why.empty()) << why;
    ASSERT_NE(runtime::cuda_backend(), nullptr);
    EXPECT_GE(runtime::cuda_backend()->device_count(), 1);
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  }
}

TEST(CudaAvailability, ExecutorOnCudaFailsClearlyWithoutGpu) {
  std::string why;
  if (runtime::cuda_available(&why)) GTEST_SKIP() << "a GPU is present: this test covers machines without one";
  OneNode t = one_node("Relu", {random_tensor({4}, 1)}, {}, 1, 17, "");
  ExecOptions o;
  o.device = kGpu;
  try {
    Executor ex(t.graph, o);
    FAIL() << "expected an error on a machine without a usable GPU";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find(why), std::string::npos) << m;
  }
}

// ---- elementwise ----

void binary_arithmetic_cases(Cases& cs) {
  Tensor a = random_tensor({4, 3, 5}, 1), b = random_tensor({3, 1}, 2), pos = random_tensor({3, 1}, 3, 0.5f, 2.f);
  cs.add("Add", {a, b});
  cs.add("Sub", {b, a});
  cs.add("Mul", {a, b});
  cs.add("Div", {a, pos});
  cs.add("Add", {a, random_tensor({4, 3, 5}, 4)});
  cs.add("Add", {i64({3}, {1, 2, 3}), i64({1}, {10})});
  cs.add("Mul", {i64({2}, {4, 5}), i64({2}, {3, -1})});
  cs.add("Pow", {random_tensor({4, 5}, 5, 0.5f, 2.f), random_tensor({5}, 6, -2.f, 2.f)}, {}, 1, 1e-5);
}
TEST(GpuKernels, BinaryArithmeticBroadcasts) { expect_group_on_gpu(binary_arithmetic_cases); }

void unary_math_cases(Cases& cs) {
  Tensor x = random_tensor({7, 33}, 7, -3.f, 3.f), pos = random_tensor({7, 33}, 8, 0.1f, 4.f);
  for (const char* op : {"Relu", "Neg", "Exp", "Sigmoid", "Tanh", "Abs"}) cs.add(op, {x});
  for (const char* op : {"Log", "Sqrt", "Reciprocal"}) cs.add(op, {pos});
  // Floor and Ceil on halves, whole numbers, signed zeros and random values.
  Tensor steps = Tensor::from_vector<float>({10}, {-2.5f, -1.f, -0.5f, -0.f, 0.f, 0.5f, 1.5f, 2.f, 3.7f, -3.7f});
  for (const char* op : {"Floor", "Ceil"}) {
    cs.add(op, {steps});
    cs.add(op, {x});
  }
}
TEST(GpuKernels, UnaryMath) { expect_group_on_gpu(unary_math_cases); }

// NaN must survive Relu, Max and Min as on the CPU (a diverging run shows a NaN loss, not zeros);
// Max and Min take one or more inputs.
void nan_and_variadic_max_min_cases(Cases& cs) {
  Tensor x = random_tensor({3, 4}, 16, -2.f, 2.f), y = random_tensor({4}, 17, -2.f, 2.f);
  x.data<float>()[1] = NAN;
  x.data<float>()[6] = -NAN;
  y.data<float>()[3] = NAN;
  cs.add("Relu", {x});
  for (const char* op : {"Max", "Min"}) {
    cs.add(op, {x, y});
    cs.add(op, {y, x});
    cs.add(op, {x});
    cs.add(op, {x, y, random_tensor({3, 1}, 18)});
    cs.add(op, {i64({3}, {1, -5, 7}), i64({1}, {2})});
  }
}
TEST(GpuKernels, NaNPropagatesAndMaxMinAreVariadic) { expect_group_on_gpu(nan_and_variadic_max_min_cases); }

void comparison_where_cast_cases(Cases& cs) {
  Tensor a = random_tensor({4, 5}, 9), b = random_tensor({5}, 10);
  // b2 ties with a at two places (row 0 column 0, row 1 column 2): the "or equal" comparisons differ there.
  Tensor b2 = b.clone();
  b2.data<float>()[0] = a.data<float>()[0];
  b2.data<float>()[2] = a.data<float>()[7];
  for (const char* op : {"Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"}) {
    cs.add(op, {a, b});
    cs.add(op, {a, b2});
    cs.add(op, {i64({4}, {1, 2, 3, 4}), i64({4}, {1, 0, 3, 5})});
  }
  cs.add("Where", {bool_tensor({4, 5}, 11), a, b});
  cs.add("ReluGrad", {random_tensor({4, 5}, 16), a}, {}, 1, 0, 17, kGraphrunDomain);  // a select: exact
  // Pass fuse_relu_bn_add's Relu(Add): a sum and a select, exact; equal shapes (a residual join) and broadcast.
  const std::map<std::string, Attribute> relu{{"activation", Attribute::Str("Relu")}};
  cs.add("FusedAdd", {a, random_tensor({4, 5}, 17)}, relu, 1, 0, 17, kGraphrunDomain);
  cs.add("FusedAdd", {a, b}, relu, 1, 0, 17, kGraphrunDomain);
  cs.add("Cast", {random_tensor({6}, 12, -5.f, 5.f)}, {{"to", Attribute::Int(7)}});
  cs.add("Cast", {random_int_tensor({6}, 13, -5, 5)}, {{"to", Attribute::Int(1)}});
  cs.add("Identity", {a});
  cs.add("StopGradient", {a}, {}, 1, 0, 17, kGraphrunDomain);  // torch's .detach(): the identity
  cs.add("Expand", {random_tensor({3, 1}, 14), i64({3}, {2, 3, 4})});
  cs.add("Sum", {a, b, random_tensor({1, 5}, 15)});
}
TEST(GpuKernels, ComparisonsWhereCast) { expect_group_on_gpu(comparison_where_cast_cases); }

// ---- activations with attributes, trigonometry, Clip, PRelu, bool logic (MobileNet's ReLU6, GELU's Erf,
// DCGAN's LeakyRelu, MobileNet V3's HardSwish, the masks of their gradients) ----

Tensor as_f64(const Tensor& t);

void activation_logic_cases(Cases& cs) {
  Tensor x = random_tensor({6, 11}, 30, -4.f, 4.f), unit = random_tensor({6, 11}, 31, -0.95f, 0.95f);
  Tensor above1 = random_tensor({6, 11}, 32, 1.05f, 4.f);
  // Halves (Round's ties to even), zeros of both signs, a NaN and infinities (IsNaN, IsInf, Sign).
  const float inf = std::numeric_limits<float>::infinity();
  Tensor special = Tensor::from_vector<float>({10}, {-2.5f, -0.5f, 0.5f, 1.5f, 2.5f, -0.f, 0.f, std::nanf(""), inf, -inf});
  for (const char* op : {"Erf", "Softplus", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Softsign",
                         "HardSwish", "Sign", "Round"})
    cs.add(op, {x}, {}, 1, 1e-5);
  for (const char* op : {"Asin", "Acos", "Atanh"}) cs.add(op, {unit}, {}, 1, 1e-5);
  cs.add("Acosh", {above1}, {}, 1, 1e-5);
  for (const char* op : {"Round", "Sign", "IsNaN", "IsInf"}) cs.add(op, {special});
  cs.add("IsInf", {special}, {{"detect_negative", Attribute::Int(0)}});
  cs.add("Sign", {i64({5}, {-3, 0, 2, -1, 7})});
  cs.add("Erf", {as_f64(x)}, {}, 1, 1e-12);
  using A = Attribute;
  cs.add("LeakyRelu", {x});
  cs.add("LeakyRelu", {x}, {{"alpha", A::Float(0.2f)}});
  cs.add("Elu", {x}, {{"alpha", A::Float(0.7f)}}, 1, 1e-5);
  cs.add("HardSigmoid", {x});
  cs.add("HardSigmoid", {x}, {{"alpha", A::Float(1.f / 6)}, {"beta", A::Float(0.5f)}});
  cs.add("Selu", {x}, {}, 1, 1e-5);
  cs.add("ThresholdedRelu", {x}, {{"alpha", A::Float(0.5f)}});
  cs.add("Celu", {x}, {{"alpha", A::Float(1.5f)}}, 1, 1e-5);
  cs.add("LeakyRelu", {as_f64(x)}, {{"alpha", A::Float(0.2f)}});
  // Clip: ReLU6 (torch's export: scalar inputs), only a max, only a min, min > max, the attributes of opset 6.
  const Tensor zero = Tensor::scalar<float>(0.f), six = Tensor::scalar<float>(6.f), empty;
  Tensor big = random_tensor({6, 11}, 33, -9.f, 9.f);
  cs.add("Clip", {big, zero, six});
  cs.add("Clip", {big, empty, six});
  cs.add("Clip", {big, Tensor::scalar<float>(-1.f)});
  cs.add("Clip", {big, Tensor::scalar<float>(2.f), Tensor::scalar<float>(1.f)});
  cs.add("Clip", {special, zero, six});
  cs.add("Clip", {i64({5}, {-3, 0, 2, -1, 7}), Tensor::scalar<int64_t>(-1), Tensor::scalar<int64_t>(3)});
  cs.add("Clip", {big}, {{"min", A::Float(-2.f)}, {"max", A::Float(3.f)}}, 1, 1e-5, 6);
  // PRelu with a slope per channel (broadcast over [N, C, H, W]) and one for all.
  Tensor img = random_tensor({2, 3, 4, 4}, 34, -2.f, 2.f);
  cs.add("PRelu", {img, random_tensor({3, 1, 1}, 35, 0.f, 0.5f)});
  cs.add("PRelu", {img, Tensor::from_vector<float>({1}, {0.25f})});
  // Bool logic, broadcast too.
  Tensor p = bool_tensor({4, 5}, 36), q = bool_tensor({4, 5}, 37), row = bool_tensor({5}, 38);
  for (const char* op : {"And", "Or", "Xor"}) {
    cs.add(op, {p, q});
    cs.add(op, {p, row});
  }
  cs.add("Not", {p});
}
TEST(GpuKernels, ActivationsTrigonometryClipLogic) { expect_group_on_gpu(activation_logic_cases); }

// ---- shape ----

Tensor as_f64(const Tensor& t);

void shape_cases(Cases& cs) {
  Tensor x = random_tensor({2, 3, 4}, 20);
  cs.add("Reshape", {x, i64({2}, {4, -1})});
  cs.add("Reshape", {x, i64({3}, {0, 4, 3})});
  cs.add("Flatten", {x}, {{"axis", Attribute::Int(2)}});
  cs.add("Transpose", {x}, ints("perm", {2, 0, 1}));
  cs.add("Transpose", {x});
  cs.add("Shape", {x});
  cs.add("Gather", {x, i64({2}, {2, -3})}, {{"axis", Attribute::Int(1)}});
  cs.add("Gather", {i64({4}, {7, 8, 9, 10}), i64({}, {1})});
  cs.add("Concat", {x, random_tensor({2, 1, 4}, 21)}, {{"axis", Attribute::Int(1)}});
  cs.add("Unsqueeze", {x, i64({2}, {0, -1})}, {}, 1, 0, 13);
  cs.add("Squeeze", {random_tensor({2, 1, 3, 1}, 22), i64({1}, {1})}, {}, 1, 0, 13);
  cs.add("Slice", {x, i64({2}, {0, 3}), i64({2}, {2, 0}), i64({2}, {1, 2}), i64({2}, {1, -1})});
  cs.add("Slice", {x, i64({1}, {1}), i64({1}, {100}), i64({1}, {-1}), Tensor()});
  // Negative steps, ends past the front (INT64_MIN as exporters write it), clamped starts.
  cs.add("Slice", {x, i64({2}, {-1, 100}), i64({2}, {INT64_MIN, 0}), i64({2}, {2, 1}), i64({2}, {-1, -2})});
  cs.add("Slice", {x, i64({1}, {2}), i64({1}, {0}), i64({1}, {0}), i64({1}, {-1})});
  // SliceGrad scatters dY where those Slices took it: the same bounds, dY of the slice's shape, f32 and f64.
  const Tensor xs = i64({3}, {2, 3, 4});
  cs.add("SliceGrad", {random_tensor({2, 2, 3}, 24), xs, i64({2}, {0, 3}), i64({2}, {2, 0}), i64({2}, {1, 2}),
                       i64({2}, {1, -1})}, {}, 1, 0, 17, kGraphrunDomain);
  cs.add("SliceGrad", {as_f64(random_tensor({2, 3, 3}, 25)), xs, i64({1}, {1}), i64({1}, {100}), i64({1}, {-1}),
                       Tensor()}, {}, 1, 0, 17, kGraphrunDomain);
  cs.add("SliceGrad", {random_tensor({2, 1, 4}, 26), xs, i64({2}, {-1, 100}), i64({2}, {INT64_MIN, 0}), i64({2}, {2, 1}),
                       i64({2}, {-1, -2})}, {}, 1, 0, 17, kGraphrunDomain);
  cs.add("SliceGrad", {random_tensor({1, 3, 4}, 27), xs, Tensor::from_vector<int32_t>({1}, {-1}),
                       Tensor::from_vector<int32_t>({1}, {100})}, {}, 1, 0, 17, kGraphrunDomain);
  cs.add("SliceGrad", {random_tensor({0, 3, 4}, 28), xs, i64({1}, {1}), i64({1}, {1})}, {}, 1, 0, 17, kGraphrunDomain);
  for (const char* mode : {"constant", "edge", "reflect"})
    cs.add("Pad", {x, i64({6}, {0, 1, 2, 1, -1, 1}), Tensor::scalar<float>(0.5f)}, {{"mode", Attribute::Str(mode)}}, 1,
                  0, 13);
  // ConstantOfShape on the device (a gradient's zeros): f32, i64 and bool values, the default 0, an empty shape.
  cs.add("ConstantOfShape", {i64({2}, {3, 4})}, {{"value", Attribute::Tens(Tensor::from_vector<float>({1}, {1.5f}))}});
  cs.add("ConstantOfShape", {i64({1}, {5})}, {{"value", Attribute::Tens(i64({1}, {-7}))}});
  cs.add("ConstantOfShape", {i64({2}, {2, 2})}, {{"value", Attribute::Tens(bool_tensor({1}, 40))}});
  cs.add("ConstantOfShape", {i64({3}, {2, 0, 3})});
  // Split (torch.chunk and split): sizes as an input, equal parts, the attribute of opset 11, a middle axis.
  cs.add("Split", {x, i64({2}, {1, 3})}, {{"axis", Attribute::Int(2)}}, 2, 0, 13);
  cs.add("Split", {x}, {{"axis", Attribute::Int(-1)}}, 2, 0, 13);
  cs.add("Split", {x}, {{"axis", Attribute::Int(1)}, {"split", Attribute::Ints({2, 0, 1})}}, 3, 0, 11);
  cs.add("Split", {i64({6}, {1, 2, 3, 4, 5, 6})}, {}, 3, 0, 13);
  // Tile (x.repeat): every axis, a zero repeat, int64.
  cs.add("Tile", {x, i64({3}, {2, 1, 3})});
  cs.add("Tile", {x, i64({3}, {1, 0, 2})});
  cs.add("Tile", {i64({2, 2}, {1, 2, 3, 4}), i64({2}, {3, 2})});
  // PixelShuffle / PixelUnshuffle and both DepthToSpace modes.
  Tensor img = random_tensor({2, 8, 3, 2}, 29);
  cs.add("DepthToSpace", {img}, {{"blocksize", Attribute::Int(2)}});
  cs.add("DepthToSpace", {img}, {{"blocksize", Attribute::Int(2)}, {"mode", Attribute::Str("CRD")}});
  cs.add("SpaceToDepth", {random_tensor({2, 3, 4, 6}, 39)}, {{"blocksize", Attribute::Int(2)}});
}
TEST(GpuKernels, ShapeOps) { expect_group_on_gpu(shape_cases); }

void constant_cases(Cases& cs) {
  cs.add("Constant", {}, {{"value", Attribute::Tens(random_tensor({3, 2}, 23))}});
  cs.add("Constant", {}, {{"value_ints", Attribute::Ints({4, 5, 6})}});
}
TEST(GpuKernels, Constant) { expect_group_on_gpu(constant_cases); }

// ---- reductions, softmax, loss ----

void reduction_cases(Cases& cs) {
  Tensor x = random_tensor({4, 3, 5}, 30);
  cs.add("ReduceSum", {x, i64({2}, {0, 2})}, {{"keepdims", Attribute::Int(0)}}, 1, 1e-5, 13);
  cs.add("ReduceSum", {x, Tensor()}, {}, 1, 1e-5, 13);
  cs.add("ReduceMean", {x}, ints("axes", {1}), 1, 1e-5, 17);
  cs.add("ReduceMean", {x}, {{"axes", Attribute::Ints({-1, 0})}, {"keepdims", Attribute::Int(0)}}, 1, 1e-5, 17);
  cs.add("ReduceMean", {x}, {}, 1, 1e-5, 17);
  cs.add("ReduceSum", {x, Tensor()}, {{"noop_with_empty_axes", Attribute::Int(1)}}, 1, 1e-5, 13);
  cs.add("SumToShape", {x, i64({2}, {3, 1})}, {}, 1, 1e-5, 17, kGraphrunDomain);
  // Long reductions take the block-per-output path.
  cs.add("SumToShape", {random_tensor({64, 6, 28, 28}, 31), i64({3}, {6, 1, 1})}, {}, 1, 1e-4, 17, kGraphrunDomain);
  // The other reductions (a thread per output, in double as the CPU folds): over one axis, two, all; kept
  // and dropped dims; a NaN, which Max and Min pass on; LogSumExp of values that would overflow exp.
  Tensor withnan = x.clone();
  withnan.data<float>()[7] = std::nanf("");
  Tensor large = random_tensor({3, 4}, 32, 80.f, 120.f);
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp"}) {
    const Tensor& in = std::string(op) == "ReduceLogSum" ? random_tensor({4, 3, 5}, 33, 0.1f, 2.f) : x;
    cs.add(op, {in}, ints("axes", {1}), 1, 1e-5, 17);
    cs.add(op, {in}, {{"axes", Attribute::Ints({-1, 0})}, {"keepdims", Attribute::Int(0)}}, 1, 1e-5, 17);
    cs.add(op, {in}, {}, 1, 1e-5, 17);
  }
  cs.add("ReduceMax", {withnan}, ints("axes", {2}), 1, 1e-5, 17);
  cs.add("ReduceMin", {withnan}, ints("axes", {2}), 1, 1e-5, 17);
  cs.add("ReduceLogSumExp", {large}, ints("axes", {1}), 1, 1e-5, 17);
}
TEST(GpuKernels, Reductions) { expect_group_on_gpu(reduction_cases); }

void softmax_cases(Cases& cs) {
  Tensor x = random_tensor({16, 10}, 40, -4.f, 4.f);
  cs.add("Softmax", {x}, {}, 1, 1e-5, 13);
  cs.add("LogSoftmax", {x}, {}, 1, 1e-5, 13);
  cs.add("Softmax", {random_tensor({4, 3, 5}, 41)}, {{"axis", Attribute::Int(1)}}, 1, 1e-5, 13);
  cs.add("LogSoftmax", {random_tensor({4, 3, 5}, 42)}, {{"axis", Attribute::Int(1)}}, 1, 1e-5, 11);
}
TEST(GpuKernels, Softmax) { expect_group_on_gpu(softmax_cases); }

// The trainer's on-device accuracy (ArgMax -> Equal -> Cast -> ReduceSum): ties pick the first index.
void arg_max_min_cases(Cases& cs) {
  Tensor x = random_tensor({64, 10}, 43);
  x.data<float>()[5] = x.data<float>()[7] = 9.f;  // a tie in row 0
  cs.add("ArgMax", {x}, {{"axis", Attribute::Int(1)}, {"keepdims", Attribute::Int(0)}}, 1, 0, 13);
  cs.add("ArgMax", {x}, {{"axis", Attribute::Int(1)}, {"select_last_index", Attribute::Int(1)}}, 1, 0, 13);
  cs.add("ArgMin", {random_tensor({4, 3, 5}, 44)}, {{"axis", Attribute::Int(1)}}, 1, 0, 13);
}
TEST(GpuKernels, ArgMaxArgMin) { expect_group_on_gpu(arg_max_min_cases); }

void loss_cases(Cases& cs) {
  Tensor scores = random_tensor({16, 10}, 50, -3.f, 3.f), labels = random_int_tensor({16}, 51, 0, 10);
  for (const char* red : {"mean", "sum", "none"}) {
    std::map<std::string, Attribute> a{{"reduction", Attribute::Str(red)}};
    cs.add("SoftmaxCrossEntropyLoss", {scores, labels}, a, 2, 1e-5, 13);
    Tensor logp = testing::run_node("LogSoftmax", {scores}, {}, 1, 13)[0];
    Tensor dloss = std::string(red) == "none" ? random_tensor({16}, 52) : random_tensor({}, 53);
    cs.add("SoftmaxCrossEntropyLossGrad", {dloss, logp, labels}, a, 1, 1e-5, 13, kGraphrunDomain);
  }
  // Weights, ignore_index and a spatial dimension.
  Tensor s3 = random_tensor({4, 5, 3}, 54), l3 = random_int_tensor({4, 3}, 55, 0, 5), w = random_tensor({5}, 56, 0.5f, 2.f);
  std::map<std::string, Attribute> a{{"ignore_index", Attribute::Int(2)}};
  cs.add("SoftmaxCrossEntropyLoss", {s3, l3, w}, a, 2, 1e-5, 13);
  Tensor lp3 = testing::run_node("LogSoftmax", {s3}, {{"axis", Attribute::Int(1)}}, 1, 13)[0];
  for (const char* red : {"mean", "sum", "none"}) {
    std::map<std::string, Attribute> ar{{"ignore_index", Attribute::Int(2)}, {"reduction", Attribute::Str(red)}};
    cs.add("SoftmaxCrossEntropyLoss", {s3, l3, w}, ar, 2, 1e-5, 13);
    Tensor dl = std::string(red) == "none" ? random_tensor({4, 3}, 57) : random_tensor({}, 58);
    cs.add("SoftmaxCrossEntropyLossGrad", {dl, lp3, l3, w}, ar, 1, 1e-5, 13, kGraphrunDomain);
  }
  // log_prob is an optional output: a loss-only node must work too.
  cs.add("SoftmaxCrossEntropyLoss", {scores, labels}, {}, 1, 1e-5, 13);
}
TEST(GpuKernels, SoftmaxCrossEntropyLossAndGrad) { expect_group_on_gpu(loss_cases); }

// ---- conv, pool, norm ----

void conv_cases(Cases& cs) {
  Tensor x = random_tensor({2, 4, 9, 9}, 60), w = random_tensor({6, 4, 3, 3}, 61), b = random_tensor({6}, 62);
  std::map<std::string, Attribute> a{{"pads", Attribute::Ints({1, 1, 1, 1})}, {"strides", Attribute::Ints({2, 2})}};
  cs.add("Conv", {x, w, b}, a, 1, 1e-5);
  cs.add("Conv", {x, random_tensor({6, 2, 3, 3}, 63)}, {{"group", Attribute::Int(2)}}, 1, 1e-5);
  cs.add("Conv", {x, random_tensor({6, 4, 5, 5}, 64)}, {{"auto_pad", Attribute::Str("SAME_UPPER")}}, 1, 1e-5);
  Tensor dy = random_tensor({2, 6, 5, 5}, 65);
  cs.add("ConvGrad", {dy, x, w}, a, 3, 1e-5, 17, kGraphrunDomain);
  // Dilations; groups with strides and pads in the gradient.
  cs.add("Conv", {x, w}, {{"dilations", Attribute::Ints({2, 2})}, {"pads", Attribute::Ints({2, 2, 2, 2})}}, 1, 1e-5);
  std::map<std::string, Attribute> ga{{"group", Attribute::Int(2)}, {"strides", Attribute::Ints({2, 1})},
                                      {"pads", Attribute::Ints({1, 0, 1, 0})}};
  Tensor wg = random_tensor({6, 2, 3, 3}, 66);
  auto yg = testing::run_node("Conv", {x, wg}, ga, 1, 17)[0];
  cs.add("ConvGrad", {random_tensor(yg.shape(), 67), x, wg}, ga, 3, 1e-5, 17, kGraphrunDomain);
  // Pass fuse_relu_epilogue's Relu(Conv): bias + Relu in the epilogue kernel after cuDNN, with and without B.
  std::map<std::string, Attribute> fa = a;
  fa["activation"] = Attribute::Str("Relu");
  cs.add("FusedConv", {x, w, b}, fa, 1, 1e-5, 17, kGraphrunDomain);
  cs.add("FusedConv", {x, w}, {{"activation", Attribute::Str("Relu")}}, 1, 1e-5, 17, kGraphrunDomain);
  // ConvTranspose (DCGAN's and UNet decoders' upsampling): stride 2 with pads and output_padding (torch's
  // ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)), groups and dilation, a bias, output_shape,
  // and its gradient with each of those geometries.
  Tensor tx = random_tensor({2, 4, 5, 5}, 68), tw = random_tensor({4, 3, 3, 3}, 69), tb = random_tensor({3}, 70);
  const std::vector<std::map<std::string, Attribute>> geoms = {
      {{"strides", Attribute::Ints({2, 2})}, {"pads", Attribute::Ints({1, 1, 1, 1})}, {"output_padding", Attribute::Ints({1, 1})}},
      {{"strides", Attribute::Ints({2, 2})}, {"output_shape", Attribute::Ints({11, 11})}},
      {{"dilations", Attribute::Ints({2, 1})}, {"pads", Attribute::Ints({1, 0, 1, 0})}}};
  for (const auto& ta : geoms) {
    cs.add("ConvTranspose", {tx, tw, tb}, ta, 1, 1e-5);
    auto ty = testing::run_node("ConvTranspose", {tx, tw}, ta, 1, 17)[0];
    cs.add("ConvTransposeGrad", {random_tensor(ty.shape(), 71), tx, tw}, ta, 3, 1e-5, 17, kGraphrunDomain);
  }
  std::map<std::string, Attribute> tg{{"group", Attribute::Int(2)}, {"strides", Attribute::Ints({2, 2})}};
  Tensor twg = random_tensor({4, 2, 4, 4}, 72);
  cs.add("ConvTranspose", {tx, twg}, tg, 1, 1e-5);
  auto tyg = testing::run_node("ConvTranspose", {tx, twg}, tg, 1, 17)[0];
  cs.add("ConvTransposeGrad", {random_tensor(tyg.shape(), 73), tx, twg}, tg, 3, 1e-5, 17, kGraphrunDomain);
}
TEST(GpuKernels, ConvAndConvGrad) { expect_group_on_gpu(conv_cases); }

// A ConvGrad without dX (a first layer's); what cuDNN cannot do, and nonsense, are clear errors.
TEST(GpuKernels, ConvGradWithoutDxAndConvErrors) {
  REQUIRE_GPU();
  Tensor x = random_tensor({2, 4, 9, 9}, 60), w = random_tensor({6, 4, 3, 3}, 61), dy = random_tensor({2, 6, 5, 5}, 65);
  std::map<std::string, Attribute> a{{"pads", Attribute::Ints({1, 1, 1, 1})}, {"strides", Attribute::Ints({2, 2})}};
  OneNode t = one_node("ConvGrad", {dy, x, w}, a, 3, 17, kGraphrunDomain);
  t.graph.nodes[0].outputs[0] = "";
  t.graph.outputs.erase(t.graph.outputs.begin());
  auto cpu = run_on(t.graph, t.feeds, kCpu, 1)[0];
  auto gpu = run_on(t.graph, t.feeds, kGpu, 2);
  for (int run = 0; run < 2; ++run)
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_LE(diff(gpu[run][i], cpu[i]), 1e-5) << "ConvGrad without dX, output " << i;
  expect_gpu_error("Conv", {x, w}, {{"pads", Attribute::Ints({1, 1, 0, 0})}}, "symmetric padding");
  expect_gpu_error("Conv", {x, w}, {{"strides", Attribute::Ints({0, 1})}}, "strides must be >= 1");
}

const std::map<std::string, Attribute> kMaxPool3x3{{"kernel_shape", Attribute::Ints({3, 3})},
                                                   {"strides", Attribute::Ints({2, 2})},
                                                   {"pads", Attribute::Ints({1, 1, 1, 1})}};

void pooling_cases(Cases& cs) {
  Tensor x = random_tensor({2, 3, 9, 9}, 70);
  const auto& mp = kMaxPool3x3;
  cs.add("MaxPool", {x}, mp, 2);
  std::map<std::string, Attribute> ap{{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}};
  cs.add("AveragePool", {x}, ap);
  auto ap_pad = mp;
  ap_pad["count_include_pad"] = Attribute::Int(1);
  cs.add("AveragePool", {x}, ap_pad);
  auto ap_ceil = ap;
  ap_ceil["ceil_mode"] = Attribute::Int(1);
  cs.add("AveragePool", {x}, ap_ceil);
  cs.add("GlobalAveragePool", {x});
  // Gradients take the forward's outputs computed by the CPU.
  auto fwd = testing::run_node("MaxPool", {x}, mp, 2);
  cs.add("MaxPoolGrad", {random_tensor(fwd[0].shape(), 71), fwd[1], x}, {}, 1, 1e-5, 17, kGraphrunDomain);
  cs.add("AveragePoolGrad", {random_tensor({2, 3, 4, 4}, 72), x}, ap, 1, 1e-5, 17, kGraphrunDomain);
  cs.add("AveragePoolGrad", {random_tensor({2, 3, 5, 5}, 73), x}, ap_pad, 1, 1e-5, 17, kGraphrunDomain);
  // relu = 1 (pass fuse_pool_relu_grad): and the gradient of the Relu before the pooling, X its output
  // (here X has negatives: the mask zeroes them).
  auto ap_relu = ap, ap_pad_relu = ap_pad;
  ap_relu["relu"] = ap_pad_relu["relu"] = Attribute::Int(1);
  cs.add("AveragePoolGrad", {random_tensor({2, 3, 4, 4}, 72), x}, ap_relu, 1, 1e-5, 17, kGraphrunDomain);
  cs.add("AveragePoolGrad", {random_tensor({2, 3, 5, 5}, 73), x}, ap_pad_relu, 1, 1e-5, 17, kGraphrunDomain);
  cs.add("MaxPoolGrad", {random_tensor(fwd[0].shape(), 71), fwd[1], x}, {{"relu", Attribute::Int(1)}}, 1, 1e-5, 17,
         kGraphrunDomain);
  // Without Indices (pass recompute_maxpool_argmax: 2x2 windows of stride 2) the gradient finds the
  // argmax again in X; 9x9 leaves a row and a column no window covers. Also on X with many ties.
  cs.add("MaxPoolGrad", {random_tensor({2, 3, 4, 4}, 77), Tensor(), x}, ap, 1, 1e-5, 17, kGraphrunDomain);
  cs.add("MaxPoolGrad", {random_tensor({2, 3, 4, 4}, 77), Tensor(), x}, ap_relu, 1, 1e-5, 17, kGraphrunDomain);
  Tensor xties = random_tensor({2, 3, 8, 8}, 78);
  for (int64_t i = 0; i < xties.numel(); ++i) xties.data<float>()[i] = std::round(xties.data<float>()[i]);
  cs.add("MaxPoolGrad", {random_tensor({2, 3, 4, 4}, 79), Tensor(), xties}, ap, 1, 1e-5, 17, kGraphrunDomain);
  // ceil_mode with pads (a last window partly outside; one starting in the end padding is dropped),
  // asymmetric pads, count_include_pad both ways, MaxPool dilations.
  Tensor x8 = random_tensor({2, 3, 8, 8}, 74);
  // kernel 2, end pad 1 on 8: ceil gives 5 windows, the fifth would start in the padding and is dropped.
  for (auto [kernel, pads] : {std::pair<int64_t, std::vector<int64_t>>{3, {1, 0, 1, 1}}, {2, {0, 0, 1, 1}}})
  for (int include : {0, 1}) {
    std::map<std::string, Attribute> c{{"kernel_shape", Attribute::Ints({kernel, kernel})}, {"strides", Attribute::Ints({2, 2})},
                                       {"pads", Attribute::Ints(pads)}, {"ceil_mode", Attribute::Int(1)},
                                       {"count_include_pad", Attribute::Int(include)}};
    cs.add("AveragePool", {x8}, c);
    auto y = testing::run_node("AveragePool", {x8}, c, 1, 17)[0];
    cs.add("AveragePoolGrad", {random_tensor(y.shape(), 75), x8}, c, 1, 1e-5, 17, kGraphrunDomain);
    c.erase("count_include_pad");
    cs.add("MaxPool", {x8}, c, 2);
    auto m = testing::run_node("MaxPool", {x8}, c, 2, 17);
    cs.add("MaxPoolGrad", {random_tensor(m[0].shape(), 76), m[1], x8}, {}, 1, 1e-5, 17, kGraphrunDomain);
  }
  cs.add("MaxPool", {x8}, {{"kernel_shape", Attribute::Ints({2, 2})}, {"dilations", Attribute::Ints({2, 2})}}, 2);
}
TEST(GpuKernels, Pooling) { expect_group_on_gpu(pooling_cases); }

TEST(GpuKernels, DeterministicMaxPoolGradAndPoolErrors) {
  REQUIRE_GPU();
  {
    // --deterministic: MaxPoolGrad over overlapping windows (ResNet's 3x3 stride 2) sums in a fixed order.
    Tensor ties = random_int_tensor({2, 3, 9, 9}, 77, 0, 3);  // few values: many windows share a maximum
    Tensor xt = random_tensor({2, 3, 9, 9}, 78);
    for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = static_cast<float>(ties.data<int64_t>()[i]);
    auto m = testing::run_node("MaxPool", {xt}, kMaxPool3x3, 2, 17);
    runtime::cuda_backend()->set_deterministic(true);
    expect_parity({"MaxPoolGrad", {random_tensor(m[0].shape(), 79), m[1], xt}, {}, 1, 1e-5, 17, kGraphrunDomain});
    OneNode t = one_node("MaxPoolGrad", {random_tensor(m[0].shape(), 79), m[1], xt}, {}, 1, 17, kGraphrunDomain);
    auto a = run_on(t.graph, t.feeds, kGpu, 1)[0], b = run_on(t.graph, t.feeds, kGpu, 1)[0];
    runtime::cuda_backend()->set_deterministic(false);
    EXPECT_EQ(testing::max_abs_diff(a[0], b[0]), 0) << "deterministic MaxPoolGrad differs between runs";
  }
  expect_gpu_error("AveragePool", {random_tensor({2, 3, 8, 8}, 74)},
                   {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({0, 0})}}, "strides must be >= 1");
}

Tensor bn_x() { return random_tensor({4, 3, 5, 5}, 80); }
std::vector<Tensor> bn_params() {
  return {random_tensor({3}, 81, 0.5f, 2.f), random_tensor({3}, 82), random_tensor({3}, 83), random_tensor({3}, 84, 0.5f, 2.f)};
}

void batch_norm_cases(Cases& cs) {
  Tensor x = bn_x();
  auto p = bn_params();
  const Tensor &scale = p[0], &bias = p[1], &mean = p[2], &var = p[3];
  std::map<std::string, Attribute> train{{"training_mode", Attribute::Int(1)}, {"momentum", Attribute::Float(0.9f)}};
  cs.add("BatchNormalization", {x, scale, bias, mean, var}, train, 3, 1e-5, 15);
  cs.add("BatchNormalization", {x, scale, bias, mean, var}, {}, 1, 1e-5, 15);
  cs.add("BatchNormalizationGrad", {random_tensor({4, 3, 5, 5}, 85), x, scale}, {}, 3, 1e-4, 17, kGraphrunDomain);
  // Running variance takes the biased batch variance (ONNX's spec, as the CPU), momentum as ONNX's
  // (running = running * momentum + batch * (1 - momentum)); a 2-D input; opset 9's saved mean/var.
  std::map<std::string, Attribute> m3{{"training_mode", Attribute::Int(1)}, {"momentum", Attribute::Float(0.3f)},
                                      {"epsilon", Attribute::Float(1e-3f)}};
  cs.add("BatchNormalization", {random_tensor({6, 3}, 86), scale, bias, mean, var}, m3, 3, 1e-5, 15);
  cs.add("BatchNormalization", {x, scale, bias, mean, var}, {{"momentum", Attribute::Float(0.8f)}}, 5, 1e-5, 9);
  // Pass fuse_relu_bn_add's Relu(BatchNormalization): training (running statistics out) and inference.
  std::map<std::string, Attribute> fused_train = train;
  fused_train["activation"] = Attribute::Str("Relu");
  cs.add("FusedBatchNormalization", {x, scale, bias, mean, var}, fused_train, 3, 1e-5, 15, kGraphrunDomain);
  cs.add("FusedBatchNormalization", {x, scale, bias, mean, var}, {{"activation", Attribute::Str("Relu")}}, 1, 1e-5, 15,
         kGraphrunDomain);
  // Its gradient: BatchNormalizationGrad of ReluGrad(dY, Y), Y with zeros and negatives (masked out).
  cs.add("FusedBatchNormalizationGrad", {random_tensor({4, 3, 5, 5}, 85), random_tensor({4, 3, 5, 5}, 92), x, scale},
         {{"activation", Attribute::Str("Relu")}}, 3, 1e-4, 17, kGraphrunDomain);
  // Dropout outside training passes its input through (with an all-true mask), as it does with ratio 0:
  // the one form every device computes alike (a training mask is drawn on the device).
  Tensor ratio = Tensor::scalar<float>(0.3f);
  cs.add("Dropout", {x, ratio, bool_scalar(false)}, {}, 2, 0, 13);
  cs.add("Dropout", {x}, {}, 2, 0, 13);
  cs.add("Dropout", {x, Tensor::scalar<float>(0.f), bool_scalar(true)}, {}, 2, 0, 13);
  // LayerNormalization over the last axis and over the last two, with and without B; its gradient from
  // the forward's statistics.
  Tensor lx = random_tensor({3, 4, 70}, 87, -2.f, 2.f), ls = random_tensor({70}, 88), lb = random_tensor({70}, 89);
  cs.add("LayerNormalization", {lx, ls, lb}, {{"epsilon", Attribute::Float(1e-3f)}}, 3, 1e-5, 17);
  cs.add("LayerNormalization", {lx, random_tensor({4, 70}, 90)}, {{"axis", Attribute::Int(1)}}, 1, 1e-5, 17);
  auto stats = testing::run_node("LayerNormalization", {lx, ls, lb}, {}, 3, 17);
  cs.add("LayerNormalizationGrad", {random_tensor({3, 4, 70}, 91), lx, ls, stats[1], stats[2]}, {}, 3, 1e-4, 17,
         kGraphrunDomain);
}
TEST(GpuKernels, BatchNormalizationAndDropout) { expect_group_on_gpu(batch_norm_cases); }

TEST(GpuKernels, BatchNormalizationErrors) {
  REQUIRE_GPU();
  auto p = bn_params();
  expect_gpu_error("BatchNormalization", {bn_x(), p[0], p[1], p[2], p[3]}, {}, "training_mode=1", 3, 15);
}

// ---- linalg, optimizer, collective ----

void gemm_matmul_cases(Cases& cs) {
  Tensor a = random_tensor({8, 5}, 90), b = random_tensor({7, 5}, 91), c = random_tensor({7}, 92);
  cs.add("Gemm", {a, b, c}, {{"transB", Attribute::Int(1)}, {"alpha", Attribute::Float(0.5f)}}, 1, 1e-5);
  cs.add("Gemm", {random_tensor({5, 8}, 93), random_tensor({5, 7}, 94)}, {{"transA", Attribute::Int(1)}}, 1, 1e-5);
  cs.add("MatMul", {random_tensor({2, 3, 4, 5}, 95), random_tensor({5, 6}, 96)}, {}, 1, 1e-5);
  cs.add("MatMul", {random_tensor({2, 1, 4, 5}, 97), random_tensor({3, 5, 6}, 98)}, {}, 1, 1e-5);
  cs.add("MatMul", {random_tensor({5}, 99), random_tensor({5, 6}, 100)}, {}, 1, 1e-5);
  // Pass fuse_relu_epilogue's Relu(Gemm) and Relu(MatMul + bias), A with a batch axis folded into the rows.
  const Attribute relu = Attribute::Str("Relu");
  cs.add("FusedGemm", {a, b, c}, {{"transB", Attribute::Int(1)}, {"alpha", Attribute::Float(0.5f)}, {"activation", relu}},
         1, 1e-5, 17, kGraphrunDomain);
  cs.add("FusedMatMul", {random_tensor({2, 4, 5}, 108), random_tensor({5, 6}, 109), random_tensor({6}, 110)},
         {{"activation", relu}}, 1, 1e-5, 17, kGraphrunDomain);
  cs.add("FusedMatMul", {random_tensor({4, 5}, 111), random_tensor({5, 6}, 112)}, {{"activation", relu}}, 1, 1e-5, 17,
         kGraphrunDomain);
  // C as a column, a scalar, a full matrix with beta; beta 0 ignores C; both transposed.
  cs.add("Gemm", {a, b, random_tensor({8, 1}, 101)}, {{"transB", Attribute::Int(1)}, {"beta", Attribute::Float(0.25f)}}, 1, 1e-5);
  cs.add("Gemm", {a, b, random_tensor({}, 102)}, {{"transB", Attribute::Int(1)}}, 1, 1e-5);
  cs.add("Gemm", {random_tensor({5, 8}, 103), b, random_tensor({8, 7}, 104)},
                {{"transA", Attribute::Int(1)}, {"transB", Attribute::Int(1)}, {"beta", Attribute::Float(-2.f)}}, 1, 1e-5);
  cs.add("Gemm", {a, b, random_tensor({8, 7}, 105)}, {{"transB", Attribute::Int(1)}, {"beta", Attribute::Float(0.f)}}, 1, 1e-5);
  // Batch axes broadcast on both sides (the per-matrix loop), both full (one strided batched call), 1-D B.
  cs.add("MatMul", {random_tensor({2, 1, 4, 5}, 106), random_tensor({1, 3, 5, 6}, 107)}, {}, 1, 1e-5);
  cs.add("MatMul", {random_tensor({3, 4, 5}, 108), random_tensor({3, 5, 6}, 109)}, {}, 1, 1e-5);
  cs.add("MatMul", {random_tensor({3, 4, 5}, 110), random_tensor({5}, 111)}, {}, 1, 1e-5);
}
TEST(GpuKernels, GemmAndMatMul) { expect_group_on_gpu(gemm_matmul_cases); }

void momentum_cases(Cases& cs) {
  Tensor r = Tensor::scalar<float>(0.1f), t = Tensor::scalar<int64_t>(3);
  std::vector<Tensor> in{r, t, random_tensor({10}, 110), random_tensor({2, 3}, 111), random_tensor({10}, 112),
                         random_tensor({2, 3}, 113), random_tensor({10}, 114), random_tensor({2, 3}, 115)};
  for (const char* mode : {"standard", "nesterov"}) {
    std::map<std::string, Attribute> a{{"alpha", Attribute::Float(0.9f)}, {"beta", Attribute::Float(1.f)},
                                       {"norm_coefficient", Attribute::Float(1e-3f)}, {"mode", Attribute::Str(mode)}};
    cs.add("Momentum", in, a, 4, 1e-6, 17, kTrainingDomain);
    // T = 0: the first update uses beta = 1 (the buffer starts as the gradient).
    std::vector<Tensor> first = in;
    first[1] = Tensor::scalar<int64_t>(0);
    a["beta"] = Attribute::Float(0.5f);
    cs.add("Momentum", first, a, 4, 1e-6, 17, kTrainingDomain);
  }
}
TEST(GpuKernels, MomentumUpdate) { expect_group_on_gpu(momentum_cases); }

// Adagrad: two tensors, the rate's decay over T, an L2 term, epsilon; H starts at 0 and at random sums.
void adagrad_cases(Cases& cs) {
  std::vector<Tensor> in{Tensor::scalar<float>(0.1f), Tensor::scalar<int64_t>(4), random_tensor({10}, 124),
                         random_tensor({2, 3}, 125), random_tensor({10}, 126), random_tensor({2, 3}, 127),
                         random_tensor({10}, 128, 0.f, 1.f), random_tensor({2, 3}, 129, 0.f, 1.f)};
  cs.add("Adagrad", in,
         {{"decay_factor", Attribute::Float(0.1f)}, {"epsilon", Attribute::Float(1e-6f)}, {"norm_coefficient", Attribute::Float(1e-3f)}},
         4, 1e-6, 17, kTrainingDomain);
  in[6] = Tensor(DType::F32, {10});
  in[7] = Tensor(DType::F32, {2, 3});
  std::memset(in[6].raw(), 0, in[6].nbytes());
  std::memset(in[7].raw(), 0, in[7].nbytes());
  in[1] = Tensor::scalar<int64_t>(0);
  cs.add("Adagrad", in, {{"epsilon", Attribute::Float(1e-10f)}}, 4, 1e-6, 17, kTrainingDomain);
}
TEST(GpuKernels, AdagradUpdate) { expect_group_on_gpu(adagrad_cases); }

void adam_cases(Cases& cs) {
  std::vector<Tensor> in{Tensor::scalar<float>(1e-2f), Tensor::scalar<int64_t>(1), random_tensor({10}, 116),
                         random_tensor({2, 3}, 117), random_tensor({10}, 118), random_tensor({2, 3}, 119),
                         random_tensor({10}, 120), random_tensor({2, 3}, 121), random_tensor({10}, 122, 0.f, 1.f),
                         random_tensor({2, 3}, 123, 0.f, 1.f)};
  // train's Adam (T counts from 1, epsilon 1e-8) and AdamW's node; then L2 and a post factor, at a later step and T = 0.
  std::map<std::string, Attribute> a{{"alpha", Attribute::Float(0.9f)}, {"beta", Attribute::Float(0.999f)},
                                     {"epsilon", Attribute::Float(1e-8f)}};
  cs.add("Adam", in, a, 6, 1e-6, 17, kTrainingDomain);
  a["norm_coefficient"] = Attribute::Float(1e-2f);
  a["norm_coefficient_post"] = Attribute::Float(1e-3f);
  for (int64_t t : {7, 0}) {
    in[1] = Tensor::scalar<int64_t>(t);
    cs.add("Adam", in, a, 6, 1e-6, 17, kTrainingDomain);
  }
  // graphrun train's Adam: epsilon on the bias-corrected sqrt (torch.optim.Adam), large enough to matter.
  a["epsilon"] = Attribute::Float(0.05f);
  for (int64_t t : {1, 7, 0}) {
    in[1] = Tensor::scalar<int64_t>(t);
    cs.add("Adam", in, a, 6, 1e-6, 1, kGraphrunDomain);
  }
}
TEST(GpuKernels, AdamUpdate) { expect_group_on_gpu(adam_cases); }

// Without a communicator AllReduce (and --sync-bn's ReplicaSum) runs in a group of one: its outputs
// are its inputs.
void all_reduce_cases(Cases& cs) {
  cs.add("AllReduce", {random_tensor({5}, 120), random_tensor({2, 2}, 121)}, {}, 2, 0, 17, kGraphrunDomain);
  cs.add("ReplicaSum", {random_tensor({1, 3, 1}, 122), random_tensor({}, 123)}, {}, 2, 0, 17, kGraphrunDomain);
}
TEST(GpuKernels, AllReduceAlone) { expect_group_on_gpu(all_reduce_cases); }

TEST(GpuKernels, AllReduceWithoutCommunicatorIsIdentity) {
  REQUIRE_GPU();
  std::vector<Tensor> in{random_tensor({5}, 120), random_tensor({2, 2}, 121)};
  OneNode t = one_node("AllReduce", in, {}, 2, 17, kGraphrunDomain);
  auto out = run_on(t.graph, t.feeds, kGpu, 2);
  for (int run = 0; run < 2; ++run)
    for (int i = 0; i < 2; ++i) EXPECT_EQ(testing::max_abs_diff(out[run][i], in[i]), 0) << "run " << run << " output " << i;
}

// Dropout draws its mask on the device (not the CPU's stream): check its contract instead.
TEST(GpuKernels, DropoutKeepsItsRatioAndScales) {
  REQUIRE_GPU();
  Tensor x = random_tensor({100000}, 130, 1.f, 2.f);
  Tensor ratio = Tensor::scalar<float>(0.3f);
  Tensor training(DType::Bool, {});
  *static_cast<uint8_t*>(training.raw()) = 1;
  OneNode t = one_node("Dropout", {x, ratio, training}, {}, 2, 13, "");
  auto out = run_on(t.graph, t.feeds, kGpu, 2);
  for (int run = 0; run < 2; ++run) {
    const float* y = out[run][0].data<float>();
    const auto* m = static_cast<const uint8_t*>(out[run][1].raw());
    int64_t kept = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      kept += m[i];
      float want = m[i] ? x.data<float>()[i] / 0.7f : 0.f;
      ASSERT_NEAR(y[i], want, 1e-5f) << "element " << i;
    }
    EXPECT_NEAR(static_cast<double>(kept) / x.numel(), 0.7, 0.01);
  }
  // Each run draws a fresh mask.
  EXPECT_GT(testing::max_abs_diff(out[0][0], out[1][0]), 0);
}

// ---- InstanceNormalization, NegativeLogLikelihoodLoss, the element-indexing ops, and their gradients ----

Tensor as_i32(const Tensor& t) { return testing::run_node("Cast", {t}, {{"to", Attribute::Int(6)}}, 1, 13)[0]; }

void instance_norm_cases(Cases& cs) {
  // Several C and spatial sizes: a 1-D and a 3-D spatial input, rows longer than a block (300 > 256).
  const std::vector<Shape> shapes = {{2, 3, 4, 5}, {1, 4, 7}, {3, 2, 2, 3, 3}, {2, 5, 300}, {1, 1, 1, 1}};
  uint64_t seed = 300;
  for (const Shape& sh : shapes) {
    const int64_t c = sh[1];
    Tensor x = random_tensor(sh, seed++, -2.f, 3.f), sc = random_tensor({c}, seed++, 0.5f, 2.f), b = random_tensor({c}, seed++);
    for (float eps : {1e-5f, 1e-2f}) {
      std::map<std::string, Attribute> a{{"epsilon", Attribute::Float(eps)}};
      cs.add("InstanceNormalization", {x, sc, b}, a, 1, 1e-4, 17);
      cs.add("InstanceNormalizationGrad", {random_tensor(sh, seed++), x, sc}, a, 3, 1e-4, 17, kGraphrunDomain);
    }
  }
  cs.add("InstanceNormalization", {random_tensor({2, 3, 6}, 320), random_tensor({3}, 321), random_tensor({3}, 322)}, {}, 1,
         1e-4, 6);
}
TEST(GpuKernels, InstanceNormalizationAndGrad) { expect_group_on_gpu(instance_norm_cases); }

void nll_loss_cases(Cases& cs) {
  Tensor lp = testing::run_node("LogSoftmax", {random_tensor({16, 10}, 330, -3.f, 3.f)}, {}, 1, 13)[0];
  Tensor labels = random_int_tensor({16}, 331, 0, 10);
  for (const char* red : {"mean", "sum", "none"}) {
    std::map<std::string, Attribute> a{{"reduction", Attribute::Str(red)}};
    cs.add("NegativeLogLikelihoodLoss", {lp, labels}, a, 1, 1e-5, 13);
    cs.add("NegativeLogLikelihoodLoss", {lp, as_i32(labels)}, a, 1, 1e-5, 13);
    Tensor dloss = std::string(red) == "none" ? random_tensor({16}, 332) : random_tensor({}, 333);
    cs.add("NegativeLogLikelihoodLossGrad", {dloss, lp, labels}, a, 1, 1e-5, 13, kGraphrunDomain);
  }
  // A spatial dimension, class weights and ignore_index (some labels hit it).
  Tensor x3 = random_tensor({4, 5, 3, 2}, 334, -3.f, 0.f), l3 = random_int_tensor({4, 3, 2}, 335, 0, 5);
  Tensor w = random_tensor({5}, 336, 0.5f, 2.f);
  for (const char* red : {"mean", "sum", "none"}) {
    std::map<std::string, Attribute> a{{"ignore_index", Attribute::Int(2)}, {"reduction", Attribute::Str(red)}};
    cs.add("NegativeLogLikelihoodLoss", {x3, l3, w}, a, 1, 1e-5, 13);
    cs.add("NegativeLogLikelihoodLoss", {x3, l3}, a, 1, 1e-5, 13);
    Tensor dl = std::string(red) == "none" ? random_tensor({4, 3, 2}, 337) : random_tensor({}, 338);
    cs.add("NegativeLogLikelihoodLossGrad", {dl, x3, l3, w}, a, 1, 1e-5, 13, kGraphrunDomain);
    cs.add("NegativeLogLikelihoodLossGrad", {dl, x3, as_i32(l3)}, a, 1, 1e-5, 13, kGraphrunDomain);
  }
}
TEST(GpuKernels, NegativeLogLikelihoodLossAndGrad) { expect_group_on_gpu(nll_loss_cases); }

void element_indexing_cases(Cases& cs) {
  Tensor data = random_tensor({4, 5, 3}, 340);
  Tensor idata = random_int_tensor({4, 5, 3}, 341, -100, 100);
  uint64_t seed = 342;
  // Per axis: indices smaller than data off the axis, longer than it on the axis (duplicates), negative ones.
  for (int64_t axis : {0, 1, -1}) {
    const int ax = axis < 0 ? 2 : static_cast<int>(axis);
    Shape ish = {3, 4, 2};
    ish[ax] = 7;
    const int64_t dim = data.dim(ax);
    Tensor ind = random_int_tensor(ish, seed++, -dim, dim);
    std::map<std::string, Attribute> a{{"axis", Attribute::Int(axis)}};
    cs.add("GatherElements", {data, ind}, a, 1, 0, 13);
    cs.add("GatherElements", {idata, as_i32(ind)}, a, 1, 0, 13);
    Tensor dy = random_tensor(ish, seed++);
    cs.add("GatherElementsGrad", {dy, ind, i64({3}, {4, 5, 3})}, a, 1, 1e-6, 13, kGraphrunDomain);
    cs.add("GatherElementsGrad", {dy, as_i32(ind), i64({3}, {4, 5, 3})}, a, 1, 1e-6, 13, kGraphrunDomain);
    // ScatterElements takes updates no longer than data on the axis; duplicates still occur.
    ish[ax] = dim;
    Tensor sind = random_int_tensor(ish, seed++, -dim, dim), upd = random_tensor(ish, seed++);
    for (const char* red : {"none", "add", "mul"}) {
      std::map<std::string, Attribute> ar{{"axis", Attribute::Int(axis)}, {"reduction", Attribute::Str(red)}};
      cs.add("ScatterElements", {data, sind, upd}, ar, 1, 1e-6, 18);
    }
    cs.add("ScatterElements", {idata, as_i32(sind), random_int_tensor(ish, seed++, -9, 9)}, a, 1, 0, 13);
  }
  // Opset 9's Scatter (ScatterElements without reduction).
  cs.add("Scatter", {data, random_int_tensor({2, 5, 3}, 353, 0, 4), random_tensor({2, 5, 3}, 354)}, {}, 1, 0, 9);
  // ScatterND: tuples of length 1 to 3 (slices of 15, 3 and 1 elements), duplicates, a batch of tuples.
  for (int64_t m : {1, 2, 3}) {
    Shape ish = {6, m};
    std::vector<int64_t> hi = {4, 5, 3};
    Tensor ind(DType::I64, ish);
    Tensor r = random_int_tensor(ish, 355 + m, 0, 1 << 20);
    for (int64_t t = 0; t < 6; ++t)
      for (int64_t a = 0; a < m; ++a) {
        const int64_t d = hi[a], v = r.data<int64_t>()[t * m + a] % (2 * d) - d;  // negative ones too
        ind.data<int64_t>()[t * m + a] = v;
      }
    Shape us = {6};
    for (int a = static_cast<int>(m); a < 3; ++a) us.push_back(data.dim(a));
    Tensor upd = random_tensor(us, 358 + m);
    for (const char* red : {"none", "add", "mul"})
      cs.add("ScatterND", {data, ind, upd}, {{"reduction", Attribute::Str(red)}}, 1, 1e-6, 18);
    cs.add("ScatterND", {idata, as_i32(ind), random_int_tensor(us, 362 + m, -9, 9)}, {}, 1, 0, 13);
  }
  cs.add("ScatterND", {data, i64({2, 2, 2}, {0, 1, 3, 4, 0, 1, 2, 2}), random_tensor({2, 2, 3}, 366)},
         {{"reduction", Attribute::Str("add")}}, 1, 1e-6, 18);
  // 1-D, as the ONNX examples.
  cs.add("GatherElements", {random_tensor({6}, 350), i64({4}, {5, 0, -1, 2})}, {}, 1, 0, 13);
  cs.add("ScatterElements", {random_tensor({5}, 351), i64({3}, {1, 1, 3}), random_tensor({3}, 352)},
         {{"reduction", Attribute::Str("add")}}, 1, 1e-6, 18);
}
TEST(GpuKernels, GatherScatterElementsAndGrad) { expect_group_on_gpu(element_indexing_cases); }

// ---- Resize, Upsample, ResizeGrad ----

Tensor f32s(Shape shape, std::vector<float> v) { return Tensor::from_vector<float>(std::move(shape), v); }

void resize_cases(Cases& cs) {
  struct Mode { const char* mode; const char* coord; const char* nearest; };
  const std::vector<Mode> modes = {
      {"nearest", "asymmetric", "floor"},          {"nearest", "half_pixel", "round_prefer_floor"},
      {"nearest", "align_corners", "round_prefer_ceil"}, {"nearest", "pytorch_half_pixel", "ceil"},
      {"nearest", "tf_half_pixel_for_nn", "floor"}, {"linear", "half_pixel", ""},
      {"linear", "align_corners", ""},             {"linear", "pytorch_half_pixel", ""},
      {"linear", "asymmetric", ""},                {"cubic", "half_pixel", ""},
      {"cubic", "align_corners", ""}};
  Tensor x = random_tensor({2, 3, 4, 5}, 360, -2.f, 2.f);
  const Tensor none;
  uint64_t seed = 361;
  for (const Mode& m : modes)
    for (bool by_sizes : {false, true})
      for (bool up : {true, false}) {
        std::map<std::string, Attribute> a{{"mode", Attribute::Str(m.mode)},
                                           {"coordinate_transformation_mode", Attribute::Str(m.coord)}};
        if (*m.nearest) a["nearest_mode"] = Attribute::Str(m.nearest);
        Tensor scales = up ? f32s({4}, {1, 1, 2, 1.5f}) : f32s({4}, {1, 1, 0.5f, 0.6f});
        Tensor sizes = up ? i64({4}, {2, 3, 7, 10}) : i64({4}, {2, 3, 3, 2});
        if (by_sizes) cs.add("Resize", {x, none, none, sizes}, a, 1, 1e-5, 13);
        else cs.add("Resize", {x, none, scales}, a, 1, 1e-5, 13);
        // The gradient from dY of the forward's output shape, with scales or without (the shapes' ratio).
        Shape ys = testing::run_node("Resize", by_sizes ? std::vector<Tensor>{x, none, none, sizes}
                                                        : std::vector<Tensor>{x, none, scales}, a, 1, 13)[0].shape();
        Tensor dy = random_tensor(ys, seed++);
        if (by_sizes) cs.add("ResizeGrad", {dy, i64({4}, {2, 3, 4, 5})}, a, 1, 1e-5, 13, kGraphrunDomain);
        else cs.add("ResizeGrad", {dy, i64({4}, {2, 3, 4, 5}), none, scales}, a, 1, 1e-5, 13, kGraphrunDomain);
      }
  // Cubic with exclude_outside and another coefficient; resizing the batch and channel axes too.
  cs.add("Resize", {x, none, f32s({4}, {1, 1, 1.75f, 0.8f})},
         {{"mode", Attribute::Str("cubic")}, {"exclude_outside", Attribute::Int(1)}, {"cubic_coeff_a", Attribute::Float(-0.5f)}}, 1,
         1e-5, 13);
  cs.add("Resize", {x, none, none, i64({4}, {3, 2, 5, 5})}, {{"mode", Attribute::Str("linear")}}, 1, 1e-5, 13);
  cs.add("ResizeGrad", {random_tensor({3, 2, 5, 5}, 380), i64({4}, {2, 3, 4, 5})}, {{"mode", Attribute::Str("linear")}}, 1, 1e-5,
         13, kGraphrunDomain);
  // tf_crop_and_resize: a roi partly outside the input takes extrapolation_value there.
  std::map<std::string, Attribute> crop{{"mode", Attribute::Str("linear")},
                                        {"coordinate_transformation_mode", Attribute::Str("tf_crop_and_resize")},
                                        {"extrapolation_value", Attribute::Float(-7.f)}};
  Tensor roi = f32s({8}, {0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f});
  cs.add("Resize", {x, roi, none, i64({4}, {2, 3, 6, 4})}, crop, 1, 1e-5, 13);
  cs.add("ResizeGrad", {random_tensor({2, 3, 6, 4}, 381), i64({4}, {2, 3, 4, 5}), roi, f32s({4}, {1, 1, 1.5f, 0.8f})}, crop, 1,
         1e-5, 13, kGraphrunDomain);
  // Opset 10's Resize and Upsample (asymmetric, floor), 3-D and 5-D inputs.
  for (const char* mode : {"nearest", "linear"}) {
    std::map<std::string, Attribute> a{{"mode", Attribute::Str(mode)}};
    cs.add("Resize", {random_tensor({1, 2, 3, 2}, 382), f32s({4}, {1, 1, 2, 3})}, a, 1, 1e-5, 10);
    cs.add("Upsample", {random_tensor({1, 2, 3, 2}, 383), f32s({4}, {1, 1, 2, 3})}, a, 1, 1e-5, 9);
    std::map<std::string, Attribute> a7{{"mode", Attribute::Str(mode)}, {"scales", Attribute::Floats({1, 1, 2, 2})}};
    cs.add("Upsample", {random_tensor({1, 2, 3, 2}, 384)}, a7, 1, 1e-5, 7);
    cs.add("Resize", {random_tensor({2, 3, 9}, 385), none, f32s({3}, {1, 1, 0.5f})}, a, 1, 1e-5, 13);
    cs.add("Resize", {random_tensor({1, 2, 3, 4, 2}, 386), none, f32s({5}, {1, 1, 2, 0.5f, 2})}, a, 1, 1e-5, 13);
  }
}
TEST(GpuKernels, ResizeUpsampleAndGrad) { expect_group_on_gpu(resize_cases); }

// ---- GridSample, GridSampleGrad ----

void grid_sample_cases(Cases& cs) {
  Tensor x = random_tensor({2, 3, 5, 6}, 390, -2.f, 2.f);
  Tensor grid = random_tensor({2, 4, 3, 2}, 391, -1.3f, 1.3f);  // partly outside: every padding acts
  Tensor dy = random_tensor({2, 3, 4, 3}, 392);
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (int align : {0, 1}) {
        std::map<std::string, Attribute> a{{"mode", Attribute::Str(mode)}, {"padding_mode", Attribute::Str(padding)},
                                           {"align_corners", Attribute::Int(align)}};
        cs.add("GridSample", {x, grid}, a, 1, 1e-5, 16);
        cs.add("GridSampleGrad", {dy, x, grid}, a, 2, 1e-4, 16, kGraphrunDomain);
      }
  // Volumes (opset 20): trilinear and nearest.
  Tensor vol = random_tensor({2, 2, 3, 4, 5}, 393, -2.f, 2.f);
  Tensor vgrid = random_tensor({2, 2, 3, 2, 3}, 394, -1.3f, 1.3f);
  Tensor vdy = random_tensor({2, 2, 2, 3, 2}, 395);
  for (const char* mode : {"bilinear", "nearest"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (int align : {0, 1}) {
        std::map<std::string, Attribute> a{{"mode", Attribute::Str(mode)}, {"padding_mode", Attribute::Str(padding)},
                                           {"align_corners", Attribute::Int(align)}};
        cs.add("GridSample", {vol, vgrid}, a, 1, 1e-5, 16);
        cs.add("GridSampleGrad", {vdy, vol, vgrid}, a, 2, 1e-4, 16, kGraphrunDomain);
      }
}
TEST(GpuKernels, GridSampleAndGrad) { expect_group_on_gpu(grid_sample_cases); }

// ---- Det, DetGrad ----

void det_cases(Cases& cs) {
  for (const Shape& s : {Shape{3, 3}, Shape{2, 4, 4}, Shape{2, 1, 1}, Shape{5, 2, 2}}) {
    Tensor x = random_tensor(s, 400 + s.back(), -2.f, 2.f);
    cs.add("Det", {x}, {}, 1, 1e-4, 13);
    cs.add("DetGrad", {random_tensor(Shape(s.begin(), s.end() - 2), 410 + s.back()), x}, {}, 1, 1e-4, 13, kGraphrunDomain);
  }
  // Singular: rank 2 (cofactors from the minors) and rank 1 (all zero).
  Tensor rank2 = f32s({3, 3}, {1, 2, 3, 4, 5, 6, 5, 7, 9}), rank1 = f32s({3, 3}, {1, 2, 3, 2, 4, 6, -1, -2, -3});
  for (const Tensor& x : {rank2, rank1}) cs.add("DetGrad", {f32s({}, {0.5f}), x}, {}, 1, 1e-4, 13, kGraphrunDomain);
}
TEST(GpuKernels, DetAndGrad) { expect_group_on_gpu(det_cases); }

// ---- LRN (its gradient is standard nodes) ----

void lrn_cases(Cases& cs) {
  // Odd and even windows, a window wider than the channels, 3-D and 5-D inputs, the defaults.
  const std::vector<std::pair<Shape, int64_t>> shapes = {{{2, 5, 3, 4}, 3}, {{1, 4, 6}, 2}, {{2, 3, 2, 2, 2}, 7}, {{1, 6, 5, 5}, 5}};
  int seed = 420;
  for (const auto& [shape, size] : shapes) {
    cs.add("LRN", {random_tensor(shape, seed++, -2.f, 2.f)},
           {{"size", Attribute::Int(size)}, {"alpha", Attribute::Float(0.3f)}, {"beta", Attribute::Float(0.6f)},
            {"bias", Attribute::Float(1.5f)}},
           1, 1e-5, 13);
    cs.add("LRN", {random_tensor(shape, seed++, -2.f, 2.f)}, {{"size", Attribute::Int(size)}}, 1, 1e-5, 13);
  }
}
TEST(GpuKernels, Lrn) { expect_group_on_gpu(lrn_cases); }

// ---- the random ops: drawn on the host, so the CPU's draws bit for bit (seeded: each case runs twice on the
// device, and an unseeded node draws afresh at each run) ----

void random_cases(Cases& cs) {
  const auto seed = [](std::map<std::string, Attribute> a) {
    a["seed"] = Attribute::Float(3.f);
    return a;
  };
  cs.add("RandomNormal", {}, seed({{"shape", Attribute::Ints({3, 4})}, {"mean", Attribute::Float(1.f)}}), 1, 0, 17);
  cs.add("RandomUniform", {}, seed({{"shape", Attribute::Ints({5})}, {"dtype", Attribute::Int(11)}}), 1, 0, 17);
  cs.add("RandomNormalLike", {random_tensor({2, 3}, 420)}, seed({}), 1, 0, 17);
  cs.add("RandomUniformLike", {random_tensor({4}, 421)}, seed({{"low", Attribute::Float(-2.f)}}), 1, 0, 17);
  cs.add("Bernoulli", {f32s({6}, {0.f, 1.f, 0.5f, 0.2f, 0.9f, 0.5f})}, seed({}), 1, 0, 17);
}
TEST(GpuKernels, RandomOps) { expect_group_on_gpu(random_cases); }

// ---- Einsum ----

void einsum_cases(Cases& cs) {
  struct Eq { const char* eq; std::vector<Shape> shapes; };
  const std::vector<Eq> eqs = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},               // matmul
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},      // batched matmul
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 2}}},  // broadcast batch dims
      {"ij->", {{5, 7}}},                            // full reduction
      {"ijk->j", {{3, 4, 5}}},                       // reduction over two axes
      {"ij->ji", {{3, 6}}},                          // transpose
      {"i,i->", {{9}, {9}}},                         // dot
      {"i,j->ij", {{3}, {4}}},                       // outer product
      {"ij,ij->ij", {{3, 4}, {3, 4}}},               // elementwise
      {"ii->i", {{4, 4}}},                           // diagonal
      {"ij,jk", {{2, 3}, {3, 2}}},                   // implicit output
      {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}},    // three operands
      {"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},  // attention scores
      {"ij,j->i", {{4, 0}, {0}}},                    // an empty summed range
  };
  uint64_t seed = 390;
  for (const Eq& e : eqs) {
    std::vector<Tensor> ins;
    for (const Shape& sh : e.shapes) ins.push_back(random_tensor(sh, seed++));
    cs.add("Einsum", ins, {{"equation", Attribute::Str(e.eq)}}, 1, 1e-5, 12);
  }
  Tensor a64 = testing::run_node("Cast", {random_tensor({2, 3, 4}, 399)}, {{"to", Attribute::Int(11)}}, 1, 13)[0];
  Tensor b64 = testing::run_node("Cast", {random_tensor({2, 4, 3}, 400)}, {{"to", Attribute::Int(11)}}, 1, 13)[0];
  cs.add("Einsum", {a64, b64}, {{"equation", Attribute::Str("bij,bjk->bik")}}, 1, 1e-12, 12);
}
TEST(GpuKernels, Einsum) { expect_group_on_gpu(einsum_cases); }

// ---- LSTM, GRU and their gradients ----

Tensor as_f64(const Tensor& t) { return testing::run_node("Cast", {t}, {{"to", Attribute::Int(11)}}, 1, 13)[0]; }

// One recurrent node's options: every direction and layout, sequences of different lengths (one of length 0
// in some), initial states, biases, peepholes, clip and GRU's linear_before_reset.
struct RnnCase {
  bool lstm;
  std::string direction;
  int64_t layout;
  bool extras;  // B, initial_h (and initial_c, P), sequence_lens
  bool clip;
  int64_t lbr;
  bool f64;
  std::vector<int32_t> lens = {5, 2, 4};
};

// The forward node's inputs (absent ones undefined) and its attributes.
std::vector<Tensor> rnn_inputs(const RnnCase& c, uint64_t seed, std::map<std::string, Attribute>* attrs) {
  const int64_t T = 5, N = 3, I = 4, H = 3, D = c.direction == "bidirectional" ? 2 : 1, G = c.lstm ? 4 : 3;
  auto t = [&](const Shape& sh, float lo = -1.f, float hi = 1.f) {
    Tensor r = random_tensor(sh, seed++, lo, hi);
    return c.f64 ? as_f64(r) : r;
  };
  const Shape ss = c.layout ? Shape{N, D, H} : Shape{D, N, H};
  std::vector<Tensor> in{t(c.layout ? Shape{N, T, I} : Shape{T, N, I}, -2.f, 2.f), t({D, G * H, I}, -0.7f, 0.7f),
                         t({D, G * H, H}, -0.7f, 0.7f)};
  in.resize(c.lstm ? 8 : 6);
  if (c.extras) {
    in[3] = t({D, 2 * G * H}, -0.5f, 0.5f);
    in[4] = Tensor::from_vector<int32_t>({N}, c.lens);
    in[5] = t(ss);
    if (c.lstm) {
      in[6] = t(ss);
      in[7] = t({D, 3 * H}, -0.5f, 0.5f);
    }
  }
  *attrs = {{"direction", Attribute::Str(c.direction)}, {"hidden_size", Attribute::Int(H)},
            {"layout", Attribute::Int(c.layout)}};
  // A small clip cuts some pre-activations (the gradient is zero there).
  if (c.clip) (*attrs)["clip"] = Attribute::Float(0.8f);
  if (!c.lstm) (*attrs)["linear_before_reset"] = Attribute::Int(c.lbr);
  return in;
}

void rnn_cases(Cases& cs) {
  std::vector<RnnCase> all;
  for (bool lstm : {true, false})
    for (int64_t lbr : lstm ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1})
      for (const char* dir : {"forward", "reverse", "bidirectional"})
        for (int64_t layout : {0, 1}) {
          all.push_back({lstm, dir, layout, true, false, lbr, false});
          all.push_back({lstm, dir, layout, false, layout == 1, lbr, false});
        }
  for (bool lstm : {true, false}) {
    all.push_back({lstm, "bidirectional", 1, true, true, 1, false, {0, 5, 3}});
    all.push_back({lstm, "bidirectional", 0, true, true, 0, true, {3, 0, 5}});
    all.push_back({lstm, "reverse", 1, true, false, 1, true});
  }
  uint64_t seed = 420;
  for (const RnnCase& c : all) {
    std::map<std::string, Attribute> a;
    std::vector<Tensor> in = rnn_inputs(c, seed, &a);
    seed += 10;
    const double tol = c.f64 ? 1e-10 : 1e-4;
    const char* op = c.lstm ? "LSTM" : "GRU";
    cs.add(op, in, a, c.lstm ? 3 : 2, tol, 14);
    // The gradient: every output gradient given, and (with the extras) every input's gradient asked for.
    const std::vector<Tensor> y = testing::run_node(op, in, a, 2, 14);
    std::vector<Tensor> gin = in;
    for (int k = 0; k < (c.lstm ? 3 : 2); ++k) {
      Tensor g = random_tensor(y[k == 0 ? 0 : 1].shape(), seed++);
      gin.push_back(c.f64 ? as_f64(g) : g);
    }
    cs.add(std::string(op) + "Grad", gin, a, c.lstm ? 7 : 5, tol, 14, kGraphrunDomain);
    // Only Y_h's gradient (dY absent), as when a classifier reads the last state.
    std::vector<Tensor> last = gin;
    last[in.size()] = Tensor();
    if (c.lstm) last.back() = Tensor();
    cs.add(std::string(op) + "Grad", last, a, c.lstm ? 7 : 5, tol, 14, kGraphrunDomain);
  }
}
TEST(GpuKernels, LstmGruAndGrads) { expect_group_on_gpu(rnn_cases); }

// ---- GatherNDGrad and Size ----

void nd_grad_size_cases(Cases& cs) {
  const Shape xs = {4, 5, 3};
  const Tensor shape = i64({3}, {4, 5, 3});
  uint64_t seed = 480;
  // Tuples of length 1 to 3 with duplicates and negative indices, in a batch of tuples [2, 3, m].
  for (int64_t m : {1, 2, 3}) {
    Tensor ind(DType::I64, {2, 3, m});
    Tensor r = random_int_tensor({2, 3, m}, seed++, 0, 1 << 20);
    for (int64_t k = 0; k < 6 * m; ++k) {
      const int64_t d = xs[k % m];
      ind.data<int64_t>()[k] = r.data<int64_t>()[k] % (2 * d) - d;
    }
    for (int64_t k = 0; k < m; ++k) ind.data<int64_t>()[m + k] = ind.data<int64_t>()[k];  // tuple 1 repeats tuple 0
    Shape ds = {2, 3};
    for (int a = static_cast<int>(m); a < 3; ++a) ds.push_back(xs[a]);
    const Tensor dy = random_tensor(ds, seed++);
    cs.add("GatherNDGrad", {dy, ind, shape}, {}, 1, 1e-6, 13, kGraphrunDomain);
    cs.add("GatherNDGrad", {as_f64(dy), ind, shape}, {}, 1, 1e-12, 13, kGraphrunDomain);
  }
  // batch_dims 1: indices [4, 2, 1] pick rows of each of the 4 batch entries (dY [4, 2, 3]); twice the same in one.
  Tensor bind = i64({4, 2, 1}, {0, 4, 2, 2, -1, 1, 3, 0});
  cs.add("GatherNDGrad", {random_tensor({4, 2, 3}, seed++), bind, shape}, {{"batch_dims", Attribute::Int(1)}}, 1, 1e-6, 13,
         kGraphrunDomain);
  // batch_dims 2: tuples of length 1 into the last axis.
  Tensor b2 = i64({4, 5, 2, 1}, std::vector<int64_t>(40, 1));
  for (int64_t k = 0; k < 40; k += 3) b2.data<int64_t>()[k] = k % 3 - 1;
  cs.add("GatherNDGrad", {random_tensor({4, 5, 2}, seed++), b2, shape}, {{"batch_dims", Attribute::Int(2)}}, 1, 1e-6, 13,
         kGraphrunDomain);
  cs.add("Size", {random_tensor({4, 5, 3}, seed++)}, {}, 1, 0, 13);
  cs.add("Size", {random_tensor({2, 0, 3}, seed++)}, {}, 1, 0, 13);
  cs.add("Size", {i64({}, {7})}, {}, 1, 0, 13);
}
TEST(GpuKernels, GatherNDGradAndSize) { expect_group_on_gpu(nd_grad_size_cases); }

// ---- Mean, Mod, Shrink, CastLike, BitShift ----

template <class U>
Tensor unsigned_tensor(DType dt, const Shape& shape, uint64_t seed, int64_t lo, int64_t hi) {
  Tensor r = random_int_tensor(shape, seed, lo, hi);
  Tensor u(dt, shape);
  for (int64_t i = 0; i < u.numel(); ++i) static_cast<U*>(u.raw())[i] = static_cast<U>(r.data<int64_t>()[i]);
  return u;
}

void mean_mod_shrink_cases(Cases& cs) {
  uint64_t seed = 900;
  const Tensor a = random_tensor({3, 4}, seed++), b = random_tensor({4}, seed++), c = random_tensor({3, 1}, seed++);
  cs.add("Mean", {a}, {}, 1, 1e-6, 13);
  cs.add("Mean", {a, b}, {}, 1, 1e-6, 13);
  cs.add("Mean", {a, b, c}, {}, 1, 1e-6, 13);
  cs.add("Mean", {as_f64(a), as_f64(c)}, {}, 1, 1e-12, 13);
  // Mod: C's fmod on floats and ints, Python's remainder (the divisor's sign) on ints, negative operands.
  const Tensor fa = random_tensor({4, 5}, seed++, -9.f, 9.f), fb = random_tensor({5}, seed++, 0.5f, 3.f);
  cs.add("Mod", {fa, fb}, {{"fmod", Attribute::Int(1)}}, 1, 1e-6, 13);
  cs.add("Mod", {as_f64(fa), as_f64(fb)}, {{"fmod", Attribute::Int(1)}}, 1, 1e-12, 13);
  Tensor ia = random_int_tensor({4, 5}, seed++, -20, 20), ib = random_int_tensor({4, 5}, seed++, 1, 7);
  for (int64_t i = 0; i < ib.numel(); i += 2) ib.data<int64_t>()[i] = -ib.data<int64_t>()[i];
  cs.add("Mod", {ia, ib}, {}, 1, 0, 13);
  cs.add("Mod", {ia, ib}, {{"fmod", Attribute::Int(1)}}, 1, 0, 13);
  cs.add("Shrink", {random_tensor({3, 7}, seed++, -3.f, 3.f)}, {{"lambd", Attribute::Float(1.5f)}, {"bias", Attribute::Float(0.5f)}},
         1, 1e-6, 13);
  cs.add("Shrink", {random_int_tensor({3, 7}, seed++, -5, 5)}, {{"lambd", Attribute::Float(2.f)}, {"bias", Attribute::Float(1.f)}},
         1, 0, 13);
  // CastLike takes only the element type of its second input.
  cs.add("CastLike", {random_tensor({2, 5}, seed++, -4.f, 4.f), i64({1}, {0})}, {}, 1, 0, 15);
  cs.add("CastLike", {random_int_tensor({2, 5}, seed++, -4, 4), random_tensor({3}, seed++)}, {}, 1, 0, 15);
  cs.add("CastLike", {random_tensor({2, 5}, seed++), bool_scalar(true)}, {}, 1, 0, 15);
  // BitShift: unsigned ints, shifts up to past the width (which give 0).
  cs.add("BitShift", {unsigned_tensor<uint8_t>(DType::U8, {4, 3}, seed, 0, 256), unsigned_tensor<uint8_t>(DType::U8, {3}, seed + 1, 0, 10)},
         {{"direction", Attribute::Str("LEFT")}}, 1, 0, 11);
  cs.add("BitShift", {unsigned_tensor<uint32_t>(DType::U32, {4, 3}, seed + 2, 0, 1 << 30), unsigned_tensor<uint32_t>(DType::U32, {4, 3}, seed + 3, 0, 40)},
         {{"direction", Attribute::Str("RIGHT")}}, 1, 0, 11);
  cs.add("BitShift", {unsigned_tensor<uint64_t>(DType::U64, {5}, seed + 4, 0, 1 << 30), unsigned_tensor<uint64_t>(DType::U64, {5}, seed + 5, 0, 70)},
         {{"direction", Attribute::Str("LEFT")}}, 1, 0, 11);
}
TEST(GpuKernels, MeanModShrinkCastLikeBitShift) { expect_group_on_gpu(mean_mod_shrink_cases); }

// ---- CumSum, TopK, Hardmax, GlobalMaxPool ----

void scan_select_cases(Cases& cs) {
  uint64_t seed = 940;
  const Tensor x = random_tensor({3, 4, 5}, seed++);
  for (int64_t ex : {0, 1})
    for (int64_t rev : {0, 1})
      cs.add("CumSum", {x, i64({}, {1})}, {{"exclusive", Attribute::Int(ex)}, {"reverse", Attribute::Int(rev)}}, 1, 1e-6, 14);
  cs.add("CumSum", {as_f64(x), i64({}, {-1})}, {}, 1, 1e-12, 14);
  cs.add("CumSum", {random_int_tensor({6, 3}, seed++, -9, 9), Tensor::from_vector<int32_t>({1}, {0})},
         {{"reverse", Attribute::Int(1)}}, 1, 0, 14);
  // TopK: ties (small integers as floats) keep the lower index first; NaN is the largest.
  Tensor ties = random_int_tensor({4, 12}, seed++, 0, 4);
  Tensor tf(DType::F32, {4, 12});
  for (int64_t i = 0; i < 48; ++i) tf.data<float>()[i] = static_cast<float>(ties.data<int64_t>()[i]);
  tf.data<float>()[5] = NAN;
  tf.data<float>()[30] = NAN;
  for (int64_t largest : {0, 1}) {
    cs.add("TopK", {tf, i64({1}, {5})}, {{"largest", Attribute::Int(largest)}}, 2, 0, 11);
    cs.add("TopK", {tf, i64({1}, {3})}, {{"axis", Attribute::Int(0)}, {"largest", Attribute::Int(largest)}}, 2, 0, 11);
  }
  cs.add("TopK", {as_f64(random_tensor({2, 3, 7}, seed++)), i64({1}, {7})}, {{"axis", Attribute::Int(2)}}, 2, 0, 11);
  cs.add("TopK", {random_int_tensor({3, 9}, seed++, -3, 3), i64({1}, {4})}, {}, 2, 0, 11);
  cs.add("TopK", {tf}, {{"k", Attribute::Int(2)}}, 2, 0, 9);
  // More than 64 (the insertion path's limit): the ranking kernel.
  Tensor wide = random_int_tensor({2, 150}, seed++, 0, 40);
  Tensor wf(DType::F32, {2, 150});
  for (int64_t i = 0; i < 300; ++i) wf.data<float>()[i] = static_cast<float>(wide.data<int64_t>()[i]);
  cs.add("TopK", {wf, i64({1}, {90})}, {}, 2, 0, 11);
  cs.add("TopK", {wf, i64({1}, {0})}, {}, 2, 0, 11);
  // Hardmax: one axis from opset 13, the flattened trailing axes before; ties and NaN as TopK.
  cs.add("Hardmax", {tf}, {}, 1, 0, 13);
  cs.add("Hardmax", {tf}, {{"axis", Attribute::Int(0)}}, 1, 0, 13);
  cs.add("Hardmax", {as_f64(random_tensor({2, 3, 4}, seed++))}, {{"axis", Attribute::Int(1)}}, 1, 0, 11);
  cs.add("Hardmax", {random_tensor({2, 3, 4}, seed++)}, {}, 1, 0, 11);
  Tensor gm = random_tensor({2, 3, 5, 4}, seed++);
  cs.add("GlobalMaxPool", {gm});
  gm.data<float>()[7] = NAN;
  cs.add("GlobalMaxPool", {as_f64(gm)});
  cs.add("GlobalMaxPool", {random_tensor({2, 4, 6}, seed++)});
}
TEST(GpuKernels, CumSumTopKHardmaxGlobalMaxPool) { expect_group_on_gpu(scan_select_cases); }

// ---- GatherND, NonZero, Unique, Compress, ReverseSequence, OneHot, Trilu, EyeLike, Range ----

void index_generate_cases(Cases& cs) {
  uint64_t seed = 980;
  const Tensor x = random_tensor({4, 5, 3}, seed++);
  cs.add("GatherND", {x, i64({3, 2}, {0, 1, -1, 4, 2, 0})}, {}, 1, 0, 13);
  cs.add("GatherND", {x, i64({2, 1, 3}, {1, 2, 0, 3, -5, 2})}, {}, 1, 0, 13);
  cs.add("GatherND", {x, Tensor::from_vector<int32_t>({4, 1}, {0, 4, 2, -3})}, {{"batch_dims", Attribute::Int(1)}}, 1, 0, 13);
  cs.add("GatherND", {random_int_tensor({2, 3}, seed++, 0, 9), i64({2, 2, 1}, {0, 2, 1, 1})}, {{"batch_dims", Attribute::Int(1)}},
         1, 0, 13);
  Tensor nz = random_tensor({3, 4, 2}, seed++);
  for (int64_t i = 0; i < nz.numel(); i += 3) nz.data<float>()[i] = 0.f;
  cs.add("NonZero", {nz}, {}, 1, 0, 13);
  cs.add("NonZero", {bool_tensor({5, 3}, seed++)}, {}, 1, 0, 13);
  cs.add("NonZero", {random_int_tensor({7}, seed++, 0, 3)}, {}, 1, 0, 13);
  cs.add("NonZero", {Tensor(DType::F32, {2, 0})}, {}, 1, 0, 13);
  // Unique: flattened (sorted, by first occurrence), along an axis, with ties and NaN.
  Tensor uq = random_int_tensor({4, 6}, seed++, -3, 3);
  cs.add("Unique", {uq}, {}, 4, 0, 11);
  cs.add("Unique", {uq}, {{"sorted", Attribute::Int(0)}}, 4, 0, 11);
  Tensor rows = i64({4, 3}, {1, 2, 3, 0, 0, 1, 1, 2, 3, -4, 5, 6});
  cs.add("Unique", {rows}, {{"axis", Attribute::Int(0)}}, 4, 0, 11);
  cs.add("Unique", {as_f64(random_tensor({2, 5, 2}, seed++))}, {{"axis", Attribute::Int(-2)}}, 4, 0, 11);
  Tensor fu = Tensor::from_vector<float>({7}, {2.f, NAN, -1.f, 2.f, NAN, 0.f, -1.f});
  cs.add("Unique", {fu}, {}, 4, 0, 11);
  cs.add("Compress", {x, bool_tensor({5}, 77)}, {{"axis", Attribute::Int(1)}}, 1, 0, 11);
  cs.add("Compress", {x, bool_tensor({3}, 78)}, {{"axis", Attribute::Int(-1)}}, 1, 0, 11);
  cs.add("Compress", {x, bool_tensor({9}, 79)}, {}, 1, 0, 11);
  cs.add("ReverseSequence", {x, i64({5}, {4, 1, 0, 2, 3})}, {}, 1, 0, 10);
  cs.add("ReverseSequence", {as_f64(x), Tensor::from_vector<int32_t>({4}, {5, 2, 0, 1})},
         {{"batch_axis", Attribute::Int(0)}, {"time_axis", Attribute::Int(1)}}, 1, 0, 10);
  const Tensor fvals = Tensor::from_vector<float>({2}, {-1.f, 3.f});
  cs.add("OneHot", {i64({2, 3}, {0, 4, -1, 2, 7, -6}), i64({}, {5}), fvals}, {}, 1, 0, 11);
  cs.add("OneHot", {Tensor::from_vector<float>({4}, {1.f, 0.f, 2.7f, -2.f}), Tensor::from_vector<float>({1}, {3.f}), i64({2}, {0, 1})},
         {{"axis", Attribute::Int(0)}}, 1, 0, 11);
  for (int64_t upper : {0, 1}) {
    cs.add("Trilu", {random_tensor({2, 4, 5}, seed++)}, {{"upper", Attribute::Int(upper)}}, 1, 0, 14);
    cs.add("Trilu", {random_int_tensor({3, 6}, seed++, -5, 5), i64({}, {-1})}, {{"upper", Attribute::Int(upper)}}, 1, 0, 14);
    cs.add("Trilu", {bool_tensor({5, 3}, seed++), i64({}, {2})}, {{"upper", Attribute::Int(upper)}}, 1, 0, 14);
  }
  cs.add("EyeLike", {random_tensor({3, 5}, seed++)}, {}, 1, 0, 9);
  cs.add("EyeLike", {random_tensor({4, 3}, seed++)}, {{"k", Attribute::Int(-1)}, {"dtype", Attribute::Int(7)}}, 1, 0, 9);
  cs.add("EyeLike", {random_int_tensor({2, 4}, seed++, 0, 3)}, {{"k", Attribute::Int(2)}}, 1, 0, 9);
  cs.add("Range", {i64({}, {-3}), i64({}, {10}), i64({}, {4})}, {}, 1, 0, 11);
  cs.add("Range", {Tensor::scalar<float>(0.5f), Tensor::scalar<float>(-2.f), Tensor::scalar<float>(-0.3f)}, {}, 1, 0, 11);
  cs.add("Range", {Tensor::scalar<double>(1.0), Tensor::scalar<double>(1.0), Tensor::scalar<double>(0.25)}, {}, 1, 0, 11);
}
TEST(GpuKernels, GatherNDNonZeroCompressReverseOneHotTriluEyeLikeRange) { expect_group_on_gpu(index_generate_cases); }

// ---- RNN and RNNGrad ----

void vanilla_rnn_cases(Cases& cs) {
  uint64_t seed = 1020;
  const int64_t T = 5, N = 3, I = 4, H = 3;
  struct C {
    const char* dir;
    int64_t layout;
    bool extras, clip, f64;
    std::vector<std::string> acts;
  };
  const std::vector<C> all = {{"forward", 0, false, false, false, {"Tanh"}},
                              {"reverse", 1, true, false, false, {"Relu"}},
                              {"bidirectional", 0, true, true, false, {"Sigmoid", "Tanh"}},
                              {"bidirectional", 1, true, false, true, {"Tanh", "Relu"}}};
  for (const C& c : all) {
    const int64_t D = std::string(c.dir) == "bidirectional" ? 2 : 1;
    auto t = [&](const Shape& sh, float lo, float hi) {
      Tensor r = random_tensor(sh, seed++, lo, hi);
      return c.f64 ? as_f64(r) : r;
    };
    std::vector<Tensor> in{t(c.layout ? Shape{N, T, I} : Shape{T, N, I}, -2.f, 2.f), t({D, H, I}, -0.7f, 0.7f),
                           t({D, H, H}, -0.7f, 0.7f)};
    in.resize(6);
    if (c.extras) {
      in[3] = t({D, 2 * H}, -0.5f, 0.5f);
      in[4] = Tensor::from_vector<int32_t>({N}, {5, 2, 0});
      in[5] = t(c.layout ? Shape{N, D, H} : Shape{D, N, H}, -1.f, 1.f);
    }
    std::map<std::string, Attribute> a{{"direction", Attribute::Str(c.dir)}, {"hidden_size", Attribute::Int(H)},
                                       {"layout", Attribute::Int(c.layout)}, {"activations", Attribute::Strs(c.acts)}};
    if (c.clip) a["clip"] = Attribute::Float(0.8f);
    const double tol = c.f64 ? 1e-10 : 1e-4;
    cs.add("RNN", in, a, 2, tol, 14);
    const std::vector<Tensor> y = testing::run_node("RNN", in, a, 2, 14);
    std::vector<Tensor> gin = in;
    for (int k = 0; k < 2; ++k) gin.push_back(t(y[k].shape(), -1.f, 1.f));
    cs.add("RNNGrad", gin, a, 5, tol, 14, kGraphrunDomain);
    gin[in.size()] = Tensor();  // only Y_h's gradient
    cs.add("RNNGrad", gin, a, 5, tol, 14, kGraphrunDomain);
  }
}
TEST(GpuKernels, RnnAndGrad) { expect_group_on_gpu(vanilla_rnn_cases); }

// ---- QuantizeLinear, DequantizeLinear, FakeQuantize, MatMulInteger, QLinearMatMul ----

Tensor to_i32(const Tensor& t) {
  Tensor r(DType::I32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<int32_t*>(r.raw())[i] = static_cast<int32_t>(t.data<int64_t>()[i]);
  return r;
}

void quantize_cases(Cases& cs) {
  uint64_t seed = 1060;
  const Tensor x = random_tensor({2, 3, 4}, seed++, -3.f, 3.f);
  const Tensor s = Tensor::scalar<float>(0.02f);
  const Tensor u8zp = unsigned_tensor<uint8_t>(DType::U8, {}, seed++, 100, 140);
  Tensor i8zp(DType::I8, {});
  *static_cast<int8_t*>(i8zp.raw()) = -3;
  cs.add("QuantizeLinear", {x, s}, {}, 1, 0, 13);  // uint8, zero point 0: the negatives saturate
  cs.add("QuantizeLinear", {x, s, u8zp}, {}, 1, 0, 13);
  cs.add("QuantizeLinear", {x, s, i8zp}, {}, 1, 0, 13);
  // One scale value in 1-D is per tensor, whatever `axis` says (axis 1 has 3 entries here).
  cs.add("QuantizeLinear", {x, Tensor::from_vector<float>({1}, {0.05f})}, {{"axis", Attribute::Int(1)}}, 1, 0, 13);
  // Per axis: 3 scales along axis 1, int8 zero points; halves land on exact ties (round half to even).
  const Tensor sc = Tensor::from_vector<float>({3}, {0.5f, 0.25f, 0.125f});
  Tensor zc(DType::I8, {3});
  for (int k = 0; k < 3; ++k) static_cast<int8_t*>(zc.raw())[k] = static_cast<int8_t>(k - 1);
  Tensor halves = Tensor::from_vector<float>({2, 3, 2}, {0.25f, -0.75f, 0.125f, 0.375f, 1.f, -1.f,
                                                         100.f, -100.f, 0.0625f, -0.1875f, 3.f, 0.f});
  cs.add("QuantizeLinear", {halves, sc, zc}, {{"axis", Attribute::Int(1)}}, 1, 0, 13);
  cs.add("QuantizeLinear", {as_f64(x), Tensor::from_vector<double>({4}, {0.01, 0.02, 0.03, 0.04})}, {{"axis", Attribute::Int(-1)}}, 1, 0,
         13);
  cs.add("QuantizeLinear", {to_i32(random_int_tensor({5}, seed++, -500, 500)), s}, {}, 1, 0, 13);
  const Tensor q = unsigned_tensor<uint8_t>(DType::U8, {2, 3, 4}, seed++, 0, 256);
  Tensor cap(DType::U8, {});
  *static_cast<uint8_t*>(cap.raw()) = 127;
  cs.add("Clip", {q, Tensor(), cap}, {}, 1, 0, 13);  // torch's reduce_range between a Q/DQ pair
  cs.add("DequantizeLinear", {q, s, u8zp}, {}, 1, 0, 13);
  cs.add("FakeQuantize", {x, s, u8zp}, {{"quant_max", Attribute::Int(127)}}, 1, 1e-6,
         13, kGraphrunDomain);
  cs.add("FakeQuantize", {halves, sc, zc}, {{"axis", Attribute::Int(1)}}, 1, 1e-6, 13, kGraphrunDomain);
  cs.add("FakeQuantize", {as_f64(x), Tensor::scalar<double>(0.05)}, {}, 1, 1e-12, 13, kGraphrunDomain);
  cs.add("DequantizeLinear", {q, sc, unsigned_tensor<uint8_t>(DType::U8, {3}, seed++, 0, 256)}, {{"axis", Attribute::Int(1)}}, 1,
         0, 13);
  cs.add("DequantizeLinear", {to_i32(random_int_tensor({6}, seed++, -1000, 1000)), Tensor::scalar<double>(0.5)}, {},
         1, 0, 13);
  // Integer matrix products: 2-D with per-row and per-column zero points, batched with broadcasting.
  const Tensor a = unsigned_tensor<uint8_t>(DType::U8, {3, 5}, seed++, 0, 256);
  Tensor b(DType::I8, {5, 4});
  Tensor br = random_int_tensor({5, 4}, seed++, -128, 128);
  for (int64_t k = 0; k < 20; ++k) static_cast<int8_t*>(b.raw())[k] = static_cast<int8_t>(br.data<int64_t>()[k]);
  cs.add("MatMulInteger", {a, b}, {}, 1, 0, 10);
  Tensor bzp(DType::I8, {4});
  for (int k = 0; k < 4; ++k) static_cast<int8_t*>(bzp.raw())[k] = static_cast<int8_t>(3 * k - 5);
  cs.add("MatMulInteger", {a, b, unsigned_tensor<uint8_t>(DType::U8, {3}, seed++, 0, 256), bzp}, {}, 1, 0, 10);
  cs.add("MatMulInteger", {unsigned_tensor<uint8_t>(DType::U8, {2, 1, 3, 5}, seed++, 0, 256),
                           unsigned_tensor<uint8_t>(DType::U8, {3, 5, 2}, seed++, 0, 256)},
         {}, 1, 0, 10);
  const Tensor ys = Tensor::scalar<float>(40.f);
  cs.add("QLinearMatMul", {a, Tensor::scalar<float>(0.1f), u8zp, b, Tensor::scalar<float>(0.3f), i8zp, ys, u8zp}, {}, 1, 0, 10);
  cs.add("QLinearMatMul", {a, Tensor::from_vector<float>({3}, {0.1f, 0.2f, 0.05f}), u8zp, b,
                           Tensor::from_vector<float>({4}, {0.3f, 0.1f, 0.2f, 0.4f}), i8zp, Tensor::scalar<float>(3.f), i8zp},
         {}, 1, 0, 10);
}
TEST(GpuKernels, QuantizeDequantizeIntegerMatMul) { expect_group_on_gpu(quantize_cases); }

// ConvInteger and QLinearConv: padding, strides, groups, per-channel weight zero points and scales, a bias.
void int_conv_cases(Cases& cs) {
  uint64_t seed = 1100;
  const Tensor x = unsigned_tensor<uint8_t>(DType::U8, {2, 4, 6, 5}, seed++, 0, 256);
  Tensor w(DType::I8, {6, 2, 3, 3});
  const Tensor wr = random_int_tensor({6, 2, 3, 3}, seed++, -128, 128);
  for (int64_t k = 0; k < w.numel(); ++k) static_cast<int8_t*>(w.raw())[k] = static_cast<int8_t>(wr.data<int64_t>()[k]);
  const Tensor xzp = unsigned_tensor<uint8_t>(DType::U8, {}, seed++, 100, 140);
  Tensor wzp(DType::I8, {6});
  for (int k = 0; k < 6; ++k) static_cast<int8_t*>(wzp.raw())[k] = static_cast<int8_t>(2 * k - 5);
  const std::map<std::string, Attribute> a{{"group", Attribute::Int(2)}, {"pads", Attribute::Ints({1, 0, 1, 2})},
                                           {"strides", Attribute::Ints({2, 1})}};
  cs.add("ConvInteger", {x, w}, a, 1, 0, 10);
  cs.add("ConvInteger", {x, w, xzp, wzp}, a, 1, 0, 10);
  Tensor w1(DType::U8, {3, 4, 2});
  const Tensor w1r = random_int_tensor({3, 4, 2}, seed++, 0, 256);
  for (int64_t k = 0; k < w1.numel(); ++k) static_cast<uint8_t*>(w1.raw())[k] = static_cast<uint8_t>(w1r.data<int64_t>()[k]);
  cs.add("ConvInteger", {unsigned_tensor<uint8_t>(DType::U8, {1, 4, 7}, seed++, 0, 256), w1}, {{"dilations", Attribute::Ints({2})}},
         1, 0, 10);
  const Tensor bias = Tensor::from_vector<int32_t>({6}, {100, -2000, 0, 35000, -7, 12});
  const Tensor ws = Tensor::from_vector<float>({6}, {0.01f, 0.02f, 0.005f, 0.03f, 0.01f, 0.015f});
  cs.add("QLinearConv", {x, Tensor::scalar<float>(0.05f), xzp, w, ws, wzp, Tensor::scalar<float>(2.f), xzp, bias}, a, 1, 0, 10);
  Tensor i8zp(DType::I8, {});
  *static_cast<int8_t*>(i8zp.raw()) = 4;
  Tensor wzp1(DType::I8, {});
  *static_cast<int8_t*>(wzp1.raw()) = 0;
  cs.add("QLinearConv", {x, Tensor::scalar<float>(0.05f), xzp, w, Tensor::scalar<float>(0.02f), wzp1, Tensor::scalar<float>(0.5f), i8zp},
         a, 1, 0, 10);
}
TEST(GpuKernels, ConvIntegerQLinearConv) { expect_group_on_gpu(int_conv_cases); }

// NonMaxSuppression: two batches and classes of overlapping boxes, both box formats, with and without a score
// threshold; ties of score.
void nms_cases(Cases& cs) {
  uint64_t seed = 1140;
  Tensor boxes = random_tensor({2, 12, 4}, seed++, 0.f, 1.f);
  Tensor scores = random_int_tensor({2, 3, 12}, seed++, 0, 6);
  Tensor sf(DType::F32, {2, 3, 12});
  for (int64_t i = 0; i < sf.numel(); ++i) sf.data<float>()[i] = 0.1f * static_cast<float>(scores.data<int64_t>()[i]);
  const Tensor most = i64({1}, {4}), iou = Tensor::from_vector<float>({1}, {0.3f}), min_score = Tensor::from_vector<float>({1}, {0.15f});
  cs.add("NonMaxSuppression", {boxes, sf, most, iou, min_score}, {}, 1, 0, 11);
  cs.add("NonMaxSuppression", {boxes, sf, most, iou}, {{"center_point_box", Attribute::Int(1)}}, 1, 0, 11);
  cs.add("NonMaxSuppression", {as_f64(boxes), as_f64(sf), i64({1}, {20}), Tensor::from_vector<float>({1}, {0.f})}, {}, 1, 0, 11);
  cs.add("NonMaxSuppression", {boxes, sf}, {}, 1, 0, 11);  // no max_output_boxes_per_class: nothing selected
}
TEST(GpuKernels, NonMaxSuppression) { expect_group_on_gpu(nms_cases); }

// RoiAlign: both coordinate modes, a fixed and an adaptive grid, regions partly outside the image.
void roi_align_cases(Cases& cs) {
  uint64_t seed = 1160;
  const Tensor x = random_tensor({2, 3, 9, 7}, seed++);
  const Tensor rois = Tensor::from_vector<float>({4, 4}, {0.f, 0.f, 6.f, 8.f, -2.f, 1.f, 5.5f, 4.f, 3.f, 3.f, 3.5f, 3.2f,
                                                          1.f, -1.f, 12.f, 11.f});
  const Tensor batch = i64({4}, {0, 1, 1, 0});
  const std::map<std::string, Attribute> fixed{{"output_height", Attribute::Int(3)}, {"output_width", Attribute::Int(2)},
                                               {"sampling_ratio", Attribute::Int(2)}, {"spatial_scale", Attribute::Float(0.8f)}};
  cs.add("RoiAlign", {x, rois, batch}, fixed, 1, 1e-5, 16);
  auto legacy = fixed;
  legacy["coordinate_transformation_mode"] = Attribute::Str("output_half_pixel");
  legacy["sampling_ratio"] = Attribute::Int(0);
  cs.add("RoiAlign", {x, rois, batch}, legacy, 1, 1e-5, 16);
  cs.add("RoiAlign", {as_f64(x), as_f64(rois), batch}, fixed, 1, 1e-12, 10);
  // Its gradient (the regions overlap on each image, so planes get several regions' taps).
  const Tensor dy = random_tensor({4, 3, 3, 2}, seed++);
  auto grad = fixed;
  grad["coordinate_transformation_mode"] = Attribute::Str("half_pixel");
  cs.add("RoiAlignGrad", {dy, x, rois, batch}, grad, 1, 1e-5, 16, kGraphrunDomain);
  legacy["coordinate_transformation_mode"] = Attribute::Str("output_half_pixel");
  cs.add("RoiAlignGrad", {dy, x, rois, batch}, legacy, 1, 1e-5, 16, kGraphrunDomain);
  cs.add("RoiAlignGrad", {as_f64(dy), as_f64(x), as_f64(rois), batch}, grad, 1, 1e-12, 16, kGraphrunDomain);
  // Mode max: the largest weighted tap, and its gradient.
  auto max = fixed;
  max["mode"] = Attribute::Str("max");
  cs.add("RoiAlign", {x, rois, batch}, max, 1, 1e-6, 16);
  max["coordinate_transformation_mode"] = Attribute::Str("half_pixel");
  cs.add("RoiAlignGrad", {dy, x, rois, batch}, max, 1, 1e-6, 16, kGraphrunDomain);
}
TEST(GpuKernels, RoiAlign) { expect_group_on_gpu(roi_align_cases); }

// DFT (real onesided padded, complex inverse along an inner axis, truncated), STFT (a window, frame_length alone, a
// complex signal two-sided), MelWeightMatrix (float and double).
void spectral_cases(Cases& cs) {
  uint64_t seed = 1200;
  const Tensor real = random_tensor({2, 9, 3, 1}, seed++), cplx = random_tensor({2, 5, 4, 2}, seed++);
  cs.add("DFT", {real, i64({}, {12})}, {{"axis", Attribute::Int(1)}, {"onesided", Attribute::Int(1)}}, 1, 1e-4, 17);
  cs.add("DFT", {cplx}, {{"axis", Attribute::Int(2)}, {"inverse", Attribute::Int(1)}}, 1, 1e-5, 17);
  cs.add("DFT", {as_f64(cplx), i64({}, {3})}, {{"axis", Attribute::Int(-3)}}, 1, 1e-12, 17);
  const Tensor signal = random_tensor({2, 40, 1}, seed++), window = random_tensor({8}, seed++);
  cs.add("STFT", {signal, i64({}, {3}), window}, {}, 1, 1e-4, 17);
  cs.add("STFT", {signal, i64({}, {5}), Tensor(), i64({}, {10})}, {}, 1, 1e-4, 17);
  cs.add("STFT", {as_f64(random_tensor({1, 30, 2}, seed++)), i64({}, {4}), as_f64(window)},
         {{"onesided", Attribute::Int(0)}}, 1, 1e-12, 17);
  auto i32 = [](int32_t v) { return Tensor::from_vector<int32_t>({}, {v}); };
  const std::vector<Tensor> bank{i32(20), i32(256), i32(16000), Tensor::scalar<float>(30.f), Tensor::scalar<float>(7000.f)};
  cs.add("MelWeightMatrix", bank, {}, 1, 0, 17);
  cs.add("MelWeightMatrix", bank, {{"output_datatype", Attribute::Int(11)}}, 1, 0, 17);
}
TEST(GpuKernels, Spectral) { expect_group_on_gpu(spectral_cases); }

// MaxRoiPool and its gradient: overlapping bins, a region past the image, a thin one, two images.
void roi_pool_cases(Cases& cs) {
  const Tensor x = random_tensor({2, 3, 7, 6}, 1320);
  const Tensor rois = Tensor::from_vector<float>(
      {3, 5}, {0, 0.4f, 1.1f, 5.2f, 6.3f, 1, -2.6f, 3.2f, 9.4f, 12.1f, 0, 2.2f, 0.6f, 2.4f, 7.3f});
  const std::map<std::string, Attribute> a{{"pooled_shape", Attribute::Ints({2, 3})},
                                           {"spatial_scale", Attribute::Float(0.8f)}};
  cs.add("MaxRoiPool", {x, rois}, a, 1, 0, 11);
  cs.add("MaxRoiPool", {as_f64(x), as_f64(rois)}, a, 1, 0, 11);
  cs.add("MaxRoiPoolGrad", {random_tensor({3, 3, 2, 3}, 1321), x, rois}, a, 1, 0, 11, kGraphrunDomain);
}
TEST(GpuKernels, MaxRoiPool) { expect_group_on_gpu(roi_pool_cases); }

// MaxUnpool: the default shape and output_shape (padded at the end of each spatial axis).
void unpool_cases(Cases& cs) {
  const Tensor x = random_tensor({1, 2, 2, 3}, 1300);
  std::vector<int64_t> at;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) at.push_back(c * 24 + (2 * i + (i + j) % 2) * 6 + 2 * j + j % 2);
  const Tensor idx = i64({1, 2, 2, 3}, at);
  const std::map<std::string, Attribute> attrs{{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}};
  cs.add("MaxUnpool", {x, idx}, attrs, 1, 0, 11);
  cs.add("MaxUnpool", {as_f64(x), idx, i64({4}, {1, 2, 5, 7})}, attrs, 1, 0, 11);
}
TEST(GpuKernels, MaxUnpool) { expect_group_on_gpu(unpool_cases); }

// TfIdfVectorizer: unigrams and bigrams with skips over int32 rows, and TFIDF weights over an int64 vector.
void tfidf_cases(Cases& cs) {
  const Tensor rows = Tensor::from_vector<int32_t>({2, 6}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8});
  const std::map<std::string, Attribute> a{{"mode", Attribute::Str("TF")},
                                           {"min_gram_length", Attribute::Int(1)},
                                           {"max_gram_length", Attribute::Int(2)},
                                           {"max_skip_count", Attribute::Int(2)},
                                           {"ngram_counts", Attribute::Ints({0, 4})},
                                           {"ngram_indexes", Attribute::Ints({0, 1, 2, 3, 4, 5, 6})},
                                           {"pool_int64s", Attribute::Ints({2, 3, 5, 4, 5, 6, 7, 8, 6, 7})}};
  cs.add("TfIdfVectorizer", {rows}, a, 1, 0, 9);
  std::map<std::string, Attribute> w = a;
  w["mode"] = Attribute::Str("TFIDF");
  w["weights"] = Attribute::Floats({0.5f, 1.f, 2.f, 0.25f, 3.f, 1.5f, 0.75f});
  w["ngram_indexes"] = Attribute::Ints({6, 5, 4, 3, 2, 1, 0});
  cs.add("TfIdfVectorizer", {i64({12}, {2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 5, 6})}, w, 1, 0, 9);
}
TEST(GpuKernels, TfIdfVectorizer) { expect_group_on_gpu(tfidf_cases); }

// ---- the op table: every CUDA kernel has a CPU reference and cases ----

// Every case group, by the name of the GpuKernels test that runs it on a GPU.
const std::vector<std::pair<const char*, CaseGroup>>& case_groups() {
  static const std::vector<std::pair<const char*, CaseGroup>> groups = {
      {"BinaryArithmeticBroadcasts", binary_arithmetic_cases},
      {"UnaryMath", unary_math_cases},
      {"ActivationsTrigonometryClipLogic", activation_logic_cases},
      {"NaNPropagatesAndMaxMinAreVariadic", nan_and_variadic_max_min_cases},
      {"ComparisonsWhereCast", comparison_where_cast_cases},
      {"ShapeOps", shape_cases},
      {"Constant", constant_cases},
      {"Reductions", reduction_cases},
      {"Softmax", softmax_cases},
      {"ArgMaxArgMin", arg_max_min_cases},
      {"SoftmaxCrossEntropyLossAndGrad", loss_cases},
      {"ConvAndConvGrad", conv_cases},
      {"Pooling", pooling_cases},
      {"BatchNormalizationAndDropout", batch_norm_cases},
      {"GemmAndMatMul", gemm_matmul_cases},
      {"MomentumUpdate", momentum_cases},
      {"AdagradUpdate", adagrad_cases},
      {"AdamUpdate", adam_cases},
      {"AllReduceAlone", all_reduce_cases},
      {"InstanceNormalizationAndGrad", instance_norm_cases},
      {"NegativeLogLikelihoodLossAndGrad", nll_loss_cases},
      {"GatherScatterElementsAndGrad", element_indexing_cases},
      {"ResizeUpsampleAndGrad", resize_cases},
      {"GridSampleAndGrad", grid_sample_cases},
      {"DetAndGrad", det_cases},
      {"Lrn", lrn_cases},
      {"RandomOps", random_cases},
      {"Einsum", einsum_cases},
      {"LstmGruAndGrads", rnn_cases},
      {"GatherNDGradAndSize", nd_grad_size_cases},
      {"MeanModShrinkCastLikeBitShift", mean_mod_shrink_cases},
      {"CumSumTopKHardmaxGlobalMaxPool", scan_select_cases},
      {"GatherNDNonZeroCompressReverseOneHotTriluEyeLikeRange", index_generate_cases},
      {"RnnAndGrad", vanilla_rnn_cases},
      {"QuantizeDequantizeIntegerMatMul", quantize_cases},
      {"ConvIntegerQLinearConv", int_conv_cases},
      {"NonMaxSuppression", nms_cases},
      {"RoiAlign", roi_align_cases},
      {"MaxRoiPool", roi_pool_cases},
      {"Spectral", spectral_cases},
      {"MaxUnpool", unpool_cases},
      {"TfIdfVectorizer", tfidf_cases},
  };
  return groups;
}

std::vector<KernelCase> all_cases() {
  Cases cs;
  for (const auto& [name, group] : case_groups()) group(cs);
  return cs.all;
}

// Runs without a GPU: every op the op table gives a CUDA kernel has a CPU kernel (the reference) and
// at least one case above, so that the GPU parity tests cover it.
TEST(CudaKernelTable, EveryCudaKernelHasACpuReferenceAndAParityCase) {
  std::set<std::string> covered;
  for (const KernelCase& c : all_cases()) covered.insert(c.key());
  int cuda_ops = 0;
  for (const auto& [key, f] : op_table().ops()) {
    if (!f.kernel(Device::Kind::CUDA)) continue;
    ++cuda_ops;
    EXPECT_TRUE(f.kernel(Device::Kind::CPU)) << key << " has a CUDA kernel (" << f.family_of("CUDA kernel")
                                             << ".cu) but no CPU reference kernel in runtime/kernels/cpu/";
    EXPECT_TRUE(covered.count(key)) << key << " has a CUDA kernel but no parity case in tests/gpu_kernels_test.cc";
  }
  if (!cuda_ops) GTEST_SKIP() << "graphrun was built without CUDA: the op table holds no CUDA kernels";
}

// Every case on the simulated device (tests/sim_backend.h: the CPU kernels behind the device interface,
// over device memory the host cannot touch) equals the CPU bit for bit. The real CUDA kernels run in
// GpuKernels.*; here the device path itself is checked for every op: host-read inputs, shape computations
// placed on the host, copies, the plan of the second run.
TEST(CudaKernelTable, EveryCaseMatchesTheCpuOnTheSimulatedDevice) {
  testing::ScopedSimDevice sim;
  int n = 0;
  for (const KernelCase& c : all_cases()) {
    expect_parity(c, /*bitwise=*/true);
    ++n;
  }
  EXPECT_GT(n, 100);
}

// ---- a hand-built training step (forward, loss, backward, update) on cuda:0 against the CPU ----
// Until the trainer lands this stands in for the model-level gradient parity: the nodes autodiff emits
// for a small LeNet-like network, planned and run as one graph.

Graph small_cnn_step() {
  Graph g;
  g.name = "small_cnn_step";
  g.opsets[""] = 17;
  g.opsets[kGraphrunDomain] = 1;
  g.opsets[kTrainingDomain] = 1;
  g.inputs = {"x", "y"};
  g.initializers["w1"] = random_tensor({4, 1, 5, 5}, 200, -0.3f, 0.3f);
  g.initializers["b1"] = random_tensor({4}, 201, -0.1f, 0.1f);
  g.initializers["w2"] = random_tensor({10, 4 * 6 * 6}, 202, -0.1f, 0.1f);
  g.initializers["b2"] = random_tensor({10}, 203, -0.1f, 0.1f);
  g.initializers["flat_shape"] = i64({2}, {0, -1});
  g.initializers["lr"] = Tensor::scalar<float>(0.1f);
  g.initializers["step"] = Tensor::scalar<int64_t>(1);
  g.initializers["dloss"] = Tensor::scalar<float>(1.f);
  g.initializers["zero"] = Tensor::scalar<float>(0.f);
  for (const char* p : {"w1", "b1", "w2", "b2"}) g.initializers[std::string("v_") + p] = Tensor(DType::F32, g.initializers[p].shape());
  g.initializers["axis0"] = i64({1}, {0});
  auto add = [&](const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                 std::map<std::string, Attribute> attrs = {}, const std::string& domain = "") {
    std::string name = "n" + std::to_string(g.nodes.size()) + "_" + op;
    g.nodes.push_back(Node{name, op, domain, std::move(in), std::move(out), std::move(attrs)});
  };
  std::map<std::string, Attribute> conv{{"pads", Attribute::Ints({2, 2, 2, 2})}};
  std::map<std::string, Attribute> pool{{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}};
  // forward: x [N,1,12,12] -> conv [N,4,12,12] -> relu -> avgpool [N,4,6,6] -> flatten -> gemm [N,10] -> loss
  add("Conv", {"x", "w1", "b1"}, {"c1"}, conv);
  add("Relu", {"c1"}, {"r1"});
  add("AveragePool", {"r1"}, {"p1"}, pool);
  add("Reshape", {"p1", "flat_shape"}, {"f1"});
  add("Gemm", {"f1", "w2", "b2"}, {"logits"}, {{"transB", Attribute::Int(1)}});
  add("SoftmaxCrossEntropyLoss", {"logits", "y"}, {"loss", "logp"});
  // backward
  add("SoftmaxCrossEntropyLossGrad", {"dloss", "logp", "y"}, {"dlogits"}, {}, kGraphrunDomain);
  add("Gemm", {"dlogits", "f1"}, {"dw2"}, {{"transA", Attribute::Int(1)}});
  add("ReduceSum", {"dlogits", "axis0"}, {"db2"}, {{"keepdims", Attribute::Int(0)}});
  add("Gemm", {"dlogits", "w2"}, {"df1"});
  add("Shape", {"p1"}, {"p1_shape"});
  add("Reshape", {"df1", "p1_shape"}, {"dp1"});
  add("AveragePoolGrad", {"dp1", "r1"}, {"dr1"}, pool, kGraphrunDomain);
  add("Greater", {"c1", "zero"}, {"c1_pos"});
  add("Where", {"c1_pos", "dr1", "zero"}, {"dc1"});
  add("ConvGrad", {"dc1", "x", "w1"}, {"", "dw1", "db1"}, conv, kGraphrunDomain);
  add("Momentum", {"lr", "step", "w1", "b1", "w2", "b2", "dw1", "db1", "dw2", "db2", "v_w1", "v_b1", "v_w2", "v_b2"},
      {"w1_new", "b1_new", "w2_new", "b2_new", "v_w1_new", "v_b1_new", "v_w2_new", "v_b2_new"},
      {{"alpha", Attribute::Float(0.9f)}, {"beta", Attribute::Float(1.f)}, {"norm_coefficient", Attribute::Float(0.f)},
       {"mode", Attribute::Str("standard")}},
      kTrainingDomain);
  g.outputs = {"loss"};
  return g;
}

TEST(GpuTraining, HandBuiltStepMatchesCpu) {
  REQUIRE_GPU();
  Graph g = small_cnn_step();
  for (const Node& n : g.nodes)
    ASSERT_TRUE(runtime::cpu_kernels().find(n)) << n.op_key() << " has no CPU reference kernel (runtime/kernels/cpu/)";
  std::vector<std::pair<std::string, std::string>> updates;
  for (const char* p : {"w1", "b1", "w2", "b2"}) {
    updates.push_back({std::string(p) + "_new", p});
    updates.push_back({std::string("v_") + p + "_new", std::string("v_") + p});
  }
  ExecOptions oc, og;
  oc.state_updates = og.state_updates = updates;
  og.device = kGpu;
  Executor cpu(g, oc), gpu(g, og);
  for (int step = 0; step < 5; ++step) {
    std::map<std::string, Tensor> feeds{{"x", random_tensor({8, 1, 12, 12}, 300 + step)},
                                        {"y", random_int_tensor({8}, 400 + step, 0, 10)}};
    Tensor lc = cpu.run(feeds).at("loss").clone();
    Tensor lg = runtime::to_host(gpu.run(feeds).at("loss"));
    EXPECT_LE(testing::max_rel_diff(lg, lc), 1e-5) << "step " << step << ": gpu " << lg.str() << " cpu " << lc.str();
  }
  for (const char* p : {"w1", "b1", "w2", "b2"}) {
    Tensor wg = runtime::to_host(gpu.state(p));
    EXPECT_LE(testing::max_rel_diff(wg, cpu.state(p)), 1e-5) << p;
  }
  // Steady state: later runs reuse the plan (one plan, no new arena).
  EXPECT_GT(gpu.plan_stats().arena_bytes, 0u);
}

// ---- replicas sharing a GPU: the device-local reduction ----

TEST(GpuReplicas, SameDeviceAllReduceSumsAcrossReplicas) {
  REQUIRE_GPU();
  const int n = 2;
  OneNode t = one_node("AllReduce", {random_tensor({1000}, 500), random_tensor({3, 7}, 501)}, {}, 2, 17, kGraphrunDomain);
  auto comms = runtime::cuda_backend()->make_communicators({kGpu, kGpu});
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  std::vector<std::map<std::string, Tensor>> feeds(n);
  for (int r = 0; r < n; ++r)
    feeds[r] = {{"in0", random_tensor({1000}, 510 + r)}, {"in1", random_tensor({3, 7}, 520 + r)}};
  std::vector<std::vector<Tensor>> outs(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ExecOptions o;
        o.device = kGpu;
        o.comm = comms[r].get();
        Executor ex(t.graph, o);
        for (int run = 0; run < 2; ++run) {
          auto out = ex.run(feeds[r]);
          outs[r] = {runtime::to_host(out.at("out0")), runtime::to_host(out.at("out1"))};
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int r = 0; r < n; ++r) ASSERT_EQ(errors[r], "") << "replica " << r;
  for (int k = 0; k < 2; ++k) {
    std::string name = "in" + std::to_string(k);
    Tensor want = feeds[0].at(name).clone();
    for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += feeds[1].at(name).data<float>()[i];
    for (int r = 0; r < n; ++r) EXPECT_LE(testing::max_abs_diff(outs[r][k], want), 1e-6) << "replica " << r << " buffer " << k;
  }
}

TEST(GpuReplicas, HostBuffersReduceThroughTheDevice) {
  REQUIRE_GPU();
  auto comms = runtime::cuda_backend()->make_communicators({kGpu, kGpu});
  std::vector<std::vector<float>> data{{1, 2, 3}, {10, 20, 30}};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { comms[r]->allreduce_sum(data[r].data(), 3); });
  for (auto& th : threads) th.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(data[r], (std::vector<float>{11, 22, 33}));
}

// ---- the models: LeNet, SimpleCNN, ResNet-18 ----

struct ModelFile {
  std::string name, path;
};
std::vector<ModelFile> model_files() {
  return {{"lenet", testing::source_dir() + "/models/lenet.onnx"},
          {"simplecnn", testing::source_dir() + "/models/simplecnn.onnx"},
          {"resnet18", testing::binary_dir() + "/models/resnet18.onnx"}};
}

// Runs without a GPU: the CUDA table must hold every op of the models' training and inference graphs.
TEST(CudaKernelTable, CoversWhatTheModelsTrainWith) {
  runtime::DeviceBackend* backend = runtime::cuda_backend();
  if (!backend) GTEST_SKIP() << "graphrun was built without CUDA";
  int checked = 0;
  for (const ModelFile& m : model_files()) {
    if (!std::filesystem::exists(m.path)) continue;
    Graph model = load_onnx(m.path);
    // Every optimizer train offers (plain SGD, momentum, nesterov, L2 weight decay, Adam, AdamW), on
    // one GPU and on two replicas, and the evaluation graph the trainer runs on the device.
    std::vector<std::pair<std::string, runtime::OptimizerOptions>> optimizers;
    runtime::OptimizerOptions o;
    optimizers.push_back({"sgd", o});
    o.weight_decay = 1e-4f;
    optimizers.push_back({"sgd+wd", o});
    o.momentum = 0.9f;
    optimizers.push_back({"momentum+wd", o});
    o.nesterov = true;
    optimizers.push_back({"nesterov+wd", o});
    for (const char* kind : {"adam", "adamw"}) {
      runtime::OptimizerOptions a;
      a.kind = kind;
      optimizers.push_back({kind, a});
      a.weight_decay = 1e-2f;
      optimizers.push_back({std::string(kind) + "+wd", a});
    }
    for (const auto& [oname, opt] : optimizers)
      for (int replicas : {1, 2}) {
        runtime::PipelineOptions po;
        po.devices.assign(replicas, kGpu);
        po.optimizer = opt;
        std::string what = m.name + " " + oname + " on " + std::to_string(replicas) + " replica(s)";
        try {
          runtime::TrainingGraphs tg = runtime::build_training_graphs(model, po);
          for (const auto& r : tg.replicas) runtime::check_supported(r.graph, backend->kernels(), what + ": training replica");
          runtime::check_supported(tg.training, backend->kernels(), what + ": training graph");
          runtime::check_supported(passes::remove_noops(passes::to_inference(tg.forward)), backend->kernels(),
                                   what + ": evaluation");
        } catch (const Error& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
    runtime::check_supported(passes::to_inference(model), backend->kernels(), m.name + " inference");
    ++checked;
  }
  if (!checked) GTEST_SKIP() << "no model files (models/*.onnx) found";
}

// Feeds of a training graph (image, labels, loss_scale): batch `b`, labels in [0, 10).
std::map<std::string, Tensor> training_feeds(const runtime::TrainingGraphs& tg, int64_t b, uint64_t seed) {
  const ValueInfo* vi = tg.training.info(tg.image);
  Shape is{b, 1, 28, 28};
  if (vi && vi->has_shape) {
    is.clear();
    for (const Dim& d : vi->shape) is.push_back(d.known() ? d.size : b);
    is[0] = b;
  }
  return {{tg.image, random_tensor(is, seed, 0.f, 1.f)},
          {tg.labels, random_int_tensor({b}, seed + 1, 0, 10)},
          {tg.loss_scale, Tensor::scalar<float>(1.f)}};
}

TEST(GpuTraining, ModelGradientsMatchCpu) {
  REQUIRE_GPU();
  int checked = 0;
  for (const ModelFile& m : model_files()) {
    if (!std::filesystem::exists(m.path)) continue;
    Graph model = load_onnx(m.path);
    runtime::TrainingGraphs tg = runtime::build_training_graphs(model, runtime::PipelineOptions{});
    bool random_ops = false;
    for (const Node& n : tg.training.nodes) random_ops |= n.op_type == "Dropout";
    if (random_ops) {
      ADD_FAILURE() << m.name << " has Dropout: its masks differ between devices; compare it without";
      continue;
    }
    auto feeds = training_feeds(tg, m.name == "resnet18" ? 4 : 16, 600);
    auto cpu = run_on(tg.training, feeds, kCpu, 1)[0];
    auto gpu = run_on(tg.training, feeds, kGpu, 2);
    // cuDNN may pick Winograd/FFT algorithms (exact in exact arithmetic, not in fp32); ResNet-18 adds
    // 18 layers of that and BatchNorm over a batch of 4, hence its looser bound.
    const double tol = m.name == "resnet18" ? 1e-3 : 1e-4;
    for (int run = 0; run < 2; ++run)
      for (size_t i = 0; i < cpu.size(); ++i)
        EXPECT_LE(diff(gpu[run][i], cpu[i]), tol) << m.name << " output '" << tg.training.outputs[i] << "' (run " << run << ")";
    ++checked;
  }
  if (!checked) GTEST_SKIP() << "no model files (models/*.onnx) found";
}

// Trains LeNet data-parallel on `devs` (one executor per replica, on threads) for `steps` SGD steps
// with momentum on a global batch of 32; returns replica 0's parameters.
std::map<std::string, Tensor> lenet_replica_params(const Graph& model, const std::vector<Device>& devs, bool async,
                                                   size_t bucket_bytes = size_t(4) << 20) {
  const int64_t B = 32;
  const int steps = 5;
  const int D = static_cast<int>(devs.size());
  runtime::PipelineOptions po;
  po.devices = devs;
  po.optimizer.momentum = 0.9f;
  po.bucket_bytes = bucket_bytes;
  runtime::TrainingGraphs tg = runtime::build_training_graphs(model, po);
  auto comms = runtime::cuda_backend()->make_communicators(po.devices);
  std::vector<std::unique_ptr<Executor>> ex;
  for (int d = 0; d < D; ++d) {
    ExecOptions o;
    o.device = devs[d];
    o.comm = comms[d].get();
    o.state_updates = tg.replicas[d].state_updates;
    o.async_kernels = async;
    ex.push_back(std::make_unique<Executor>(tg.replicas[d].graph, o));
  }
  for (int s = 0; s < steps; ++s) {
    auto whole = training_feeds(tg, B, 700 + 10 * s);
    std::vector<std::string> errors(D);
    std::vector<std::thread> threads;
    for (int d = 0; d < D; ++d)
      threads.emplace_back([&, d] {
        try {
          const int64_t n = B / D;
          const Tensor& img = whole.at(tg.image);
          const int64_t per = img.numel() / B;
          Shape is = img.shape();
          is[0] = n;
          Tensor x(DType::F32, is), y(DType::I64, {n});
          std::copy(img.data<float>() + d * n * per, img.data<float>() + (d + 1) * n * per, x.data<float>());
          std::copy(whole.at(tg.labels).data<int64_t>() + d * n, whole.at(tg.labels).data<int64_t>() + (d + 1) * n,
                    y.data<int64_t>());
          std::map<std::string, Tensor> in{{tg.image, x}, {tg.labels, y},
                                           {tg.loss_scale, Tensor::scalar<float>(float(n) / float(B))},
                                           {"lr", Tensor::scalar<float>(0.05f)}};
          if (tg.replicas[d].graph.is_input("step")) in["step"] = Tensor::scalar<int64_t>(s);
          ex[d]->run(in);
        } catch (const std::exception& e) {
          errors[d] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int d = 0; d < D; ++d) {
      EXPECT_EQ(errors[d], "") << D << " replicas, replica " << d << ", step " << s;
      if (!errors[d].empty()) return {};
    }
  }
  if (async && D > 1 && !devs[0].is_cpu() && devs[0] != devs[1]) {
    EXPECT_GT(ex[0]->plan_stats().async_nodes, 0) << "NCCL AllReduce did not run asynchronously";
  }
  std::map<std::string, Tensor> params;
  for (const auto& p : tg.params) params[p] = runtime::to_host(ex[0]->state(p));
  return params;
}

// 1 replica on the whole batch vs 2 replicas on cuda:0,cuda:0 (halves, AllReduce, same update):
// the same parameters after a few SGD steps with momentum.
TEST(GpuReplicas, OneAndTwoSameDeviceReplicasHoldTheSameParameters) {
  REQUIRE_GPU();
  std::string path = testing::source_dir() + "/models/lenet.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "models/lenet.onnx is missing";
  Graph model = load_onnx(path);
  std::map<std::string, Tensor> params[2];
  for (int D : {1, 2}) params[D - 1] = lenet_replica_params(model, std::vector<Device>(D, kGpu), false);
  ASSERT_FALSE(params[0].empty());
  for (const auto& [name, t] : params[0])
    // Float sums in another order (cuDNN picks algorithms per batch size): looser than the CPU's 1e-5.
    EXPECT_LE(testing::max_rel_diff(params[1].at(name), t), 1e-4) << name;
}

// A stop on request (Ctrl-C, runtime/interrupt.h) on two replicas of one GPU, whose host threads run a
// step ahead of the device: both stop at step 2, the checkpoint is written, and the run resumed from it
// ends where the uninterrupted one does (deterministic kernels: bitwise but for cuDNN's own choices).
TEST(GpuReplicas, AStopOnRequestStopsBothReplicasAtOneStepAndResumes) {
  REQUIRE_GPU();
  const std::string path = testing::source_dir() + "/models/lenet.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "models/lenet.onnx is missing";
  runtime::TrainOptions o;
  const char* data = std::getenv("GRAPHRUN_DATA");
  if (data && *data) o.data_dir = data;
  if (!std::filesystem::exists(o.data_dir)) GTEST_SKIP() << "no Fashion-MNIST at " << o.data_dir << " (set GRAPHRUN_DATA)";
  const Graph model = load_onnx(path);
  o.pipeline.devices = {kGpu, kGpu};
  o.batch_size = 32;
  o.epochs = 2;
  o.max_steps = 8;
  o.train_limit = 32 * 8;
  o.test_limit = 200;
  o.progress = 0;
  o.keep_checkpoints = 10;
  runtime::cuda_backend()->set_deterministic(true);
  auto states = [](runtime::Trainer& t) {
    std::map<std::string, Tensor> r;
    for (int d = 0; d < t.replicas(); ++d)
      for (const auto& [name, v] : t.replica(d).states()) r["r" + std::to_string(d) + "/" + name] = runtime::to_host(v);
    return r;
  };
  std::map<std::string, Tensor> full;
  {
    runtime::Trainer t(model, o);
    t.fit();
    full = states(t);
  }
  o.checkpoint_dir = testing::temp_dir("gpu_stop");
  runtime::interrupt::request(SIGINT);
  int64_t step = -1;
  try {
    runtime::Trainer(model, o).fit();
  } catch (const runtime::InterruptedError& e) {
    step = e.step;
  }
  runtime::interrupt::clear();
  EXPECT_EQ(step, 2);
  o.resume = true;
  runtime::Trainer t(model, o);
  t.fit();
  EXPECT_EQ(t.global_step(), 16);
  const auto got = states(t);
  for (const auto& [name, v] : full) EXPECT_LE(testing::max_rel_diff(got.at(name), v), 1e-6) << name;
}

// AllReduce overlapping the compute stream (ExecOptions::async_kernels) gives what the blocking
// path gives: on cuda:0,cuda:0 (the device-local reduction stays stream-ordered) and, with two
// GPUs, over NCCL with 16 KB buckets, so that several buckets (each with its own event) are in flight.
TEST(GpuReplicas, OverlappedAllReduceMatchesTheBlockingOne) {
  REQUIRE_GPU();
  std::string path = testing::source_dir() + "/models/lenet.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "models/lenet.onnx is missing";
  Graph model = load_onnx(path);
  std::vector<std::vector<Device>> setups = {{kGpu, kGpu}};
  if (runtime::cuda_backend()->device_count() >= 2) setups.push_back({kGpu, Device{Device::Kind::CUDA, 1}});
  for (const auto& devs : setups) {
    const std::string where = runtime::devices_str(devs);
    auto blocking = lenet_replica_params(model, devs, false, size_t(16) << 10);
    auto overlapped = lenet_replica_params(model, devs, true, size_t(16) << 10);
    ASSERT_FALSE(blocking.empty()) << where;
    ASSERT_EQ(blocking.size(), overlapped.size()) << where;
    for (const auto& [name, t] : blocking)
      // The same kernels and reductions; only cuDNN's choice of algorithm may differ between runs.
      EXPECT_LE(testing::max_rel_diff(overlapped.at(name), t), 1e-4) << name << " on " << where;
  }
  if (setups.size() == 1) std::cout << "note: one GPU: the NCCL path of the overlap needs two and was not run\n";
}

}  // namespace
}  // namespace graphrun
