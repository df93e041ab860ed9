// ONNX import/export: models written by onnx.helper at test time, round trips, checker validity, bad files.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "graph/onnx_io.h"
#include "graph/passes/train_mode.h"
#include "graph/printer.h"
#include "graph/tensor_io.h"
#include "runtime/executor.h"
#include "runtime/pipeline.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::python;
using testing::run_command;
using testing::run_onnx_python;
using testing::temp_dir;


// The Python checker, full check: what the issue asks of every exported model.
void expect_python_valid(const std::string& path) {
  auto r = run_command(python() + " -c \"import onnx; onnx.checker.check_model(onnx.load('" + path +
                       "'), full_check=True); print('valid')\"");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("valid"), std::string::npos) << r.output;
}

// A Conv/Relu/Flatten model: a raw initializer, a typed-field initializer, an initializer also listed
// as an input (old exporters did this), a symbolic batch dimension and unnamed nodes.
const char* kTinyModel = R"(
X = helper.make_tensor_value_info('image', TensorProto.FLOAT, ['N', 1, 6, 6])
Wi = helper.make_tensor_value_info('w', TensorProto.FLOAT, [2, 1, 3, 3])
Y = helper.make_tensor_value_info('out', TensorProto.FLOAT, ['N', None])
w = numpy_helper.from_array(np.arange(18, dtype=np.float32).reshape(2, 1, 3, 3) / 10, 'w')
b = helper.make_tensor('b', TensorProto.FLOAT, [2], [0.5, -0.5])
nodes = [helper.make_node('Conv', ['image', 'w', 'b'], ['conv1'], kernel_shape=[3, 3], pads=[0, 0, 0, 0]),
         helper.make_node('Relu', ['conv1'], ['relu1'], name='relu1'),
         helper.make_node('Flatten', ['relu1'], ['out'])]
g = helper.make_graph(nodes, 'tiny', [X, Wi], [Y], [w, b])
m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)], producer_name='test')
onnx.save(m, 'tiny.onnx')
)";

TEST(OnnxIo, LoadsModelWithInitializersAndSymbolicDims) {
  std::string dir = temp_dir("onnx_io_load");
  run_onnx_python(dir, kTinyModel);
  Graph g = load_onnx(dir + "/tiny.onnx");
  EXPECT_EQ(g.name, "tiny");
  EXPECT_EQ(g.opset(""), 13);
  EXPECT_EQ(g.producer_name, "test");
  ASSERT_EQ(g.inputs, std::vector<std::string>{"image"});  // 'w' is a parameter, not a runtime input
  ASSERT_EQ(g.outputs, std::vector<std::string>{"out"});
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].op_type, "Conv");
  EXPECT_FALSE(g.nodes[0].name.empty());  // unnamed nodes get a name for messages
  EXPECT_NE(g.nodes[0].name, g.nodes[2].name);
  EXPECT_EQ(g.nodes[0].attr_ints("kernel_shape"), (std::vector<int64_t>{3, 3}));
  ASSERT_TRUE(g.is_initializer("w") && g.is_initializer("b"));
  EXPECT_EQ(g.initializers["b"].to_vector<float>(), (std::vector<float>{0.5f, -0.5f}));
  auto w = g.initializers["w"].to_vector<float>();
  ASSERT_EQ(w.size(), 18u);
  EXPECT_FLOAT_EQ(w[17], 1.7f);
  EXPECT_EQ(g.values.at("image").str(), "f32[N,1,6,6]");
  EXPECT_EQ(g.values.at("conv1").str(), "f32[N,2,4,4]");  // from onnx shape inference
  EXPECT_EQ(g.values.at("out").str(), "f32[N,32]");       // declared [N,?], inferred [N,32]
}

TEST(OnnxIo, SortsNodesTopologically) {
  std::string dir = temp_dir("onnx_io_topo");
  // The checker wants sorted nodes, so write a sorted model and shuffle after loading.
  run_onnx_python(dir, R"(
X = helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info('z', TensorProto.FLOAT, [2])
nodes = [helper.make_node('Relu', ['x'], ['y'], name='a'), helper.make_node('Neg', ['y'], ['z'], name='b')]
onnx.save(helper.make_model(helper.make_graph(nodes, 'g', [X], [Y]), opset_imports=[helper.make_opsetid('', 17)]), 'm.onnx')
)");
  Graph g = load_onnx(dir + "/m.onnx");
  std::swap(g.nodes[0], g.nodes[1]);
  // Export writes nodes as given; topo_sort before export is the caller's job, so re-sort and round trip.
  g.topo_sort();
  Graph h = load_onnx_bytes(onnx_bytes(g), "bytes");
  ASSERT_EQ(h.nodes.size(), 2u);
  EXPECT_EQ(h.nodes[0].name, "a");
  EXPECT_EQ(h.nodes[1].name, "b");
}

TEST(OnnxIo, AttributesOfEveryKindRoundTrip) {
  std::string dir = temp_dir("onnx_io_attrs");
  // A custom-domain op: the checker does not validate its attributes, so every kind can appear.
  run_onnx_python(dir, R"(
X = helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [2])
t = numpy_helper.from_array(np.array([[1, 2], [3, 4]], dtype=np.int64), 't')
n = helper.make_node('Foo', ['x'], ['y'], name='foo', domain='my.ops', f=1.5, i=-7, s='hello', t=t,
                     floats=[0.25, 2.0], ints=[1, 2, 3], strings=['a', 'bc'])
m = helper.make_model(helper.make_graph([n], 'g', [X], [Y]),
                      opset_imports=[helper.make_opsetid('', 17), helper.make_opsetid('my.ops', 1)])
onnx.save(m, 'm.onnx')
)");
  for (int pass = 0; pass < 2; ++pass) {
    Graph g = pass == 0 ? load_onnx(dir + "/m.onnx") : load_onnx(dir + "/saved.onnx");
    ASSERT_EQ(g.nodes.size(), 1u);
    const Node& n = g.nodes[0];
    EXPECT_EQ(n.domain, "my.ops");
    EXPECT_EQ(g.opset("my.ops"), 1);
    EXPECT_FLOAT_EQ(n.attr_f("f", 0), 1.5f);
    EXPECT_EQ(n.attr_i("i", 0), -7);
    EXPECT_EQ(n.attr_s("s", ""), "hello");
    EXPECT_EQ(n.attr_floats("floats"), (std::vector<float>{0.25f, 2.0f}));
    EXPECT_EQ(n.attr_ints("ints"), (std::vector<int64_t>{1, 2, 3}));
    ASSERT_NE(n.attr("strings"), nullptr);
    EXPECT_EQ(n.attr("strings")->strings, (std::vector<std::string>{"a", "bc"}));
    ASSERT_NE(n.attr("t"), nullptr);
    EXPECT_EQ(n.attr("t")->t.shape(), (Shape{2, 2}));
    EXPECT_EQ(n.attr("t")->t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
    if (pass == 0) save_onnx(g, dir + "/saved.onnx");
  }
  expect_python_valid(dir + "/saved.onnx");
}

TEST(OnnxIo, InitializersOfEveryNumericDtype) {
  std::string dir = temp_dir("onnx_io_dtypes");
  // Each dtype twice: raw_data (numpy_helper) and the typed field (make_tensor with raw=False).
  run_onnx_python(dir, R"(
X = helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [2])
inits = []
for name, dt in [('f32', np.float32), ('f64', np.float64), ('i64', np.int64), ('i32', np.int32), ('i16', np.int16),
                 ('i8', np.int8), ('u8', np.uint8), ('u16', np.uint16), ('u32', np.uint32), ('u64', np.uint64),
                 ('bool', np.bool_), ('f16', np.float16)]:
    a = (np.arange(6).reshape(2, 3) % (2 if dt == np.bool_ else 100)).astype(dt)
    inits.append(numpy_helper.from_array(a, 'raw_' + name))
    inits.append(helper.make_tensor('typed_' + name, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[a.dtype], a.shape,
                                    a.flatten().tolist()))  # make_tensor packs float16 itself
n = helper.make_node('Relu', ['x'], ['y'])
onnx.save(helper.make_model(helper.make_graph([n], 'g', [X], [Y], inits), opset_imports=[helper.make_opsetid('', 17)]), 'm.onnx')
)");
  Graph g = load_onnx(dir + "/m.onnx");
  Graph back = load_onnx_bytes(onnx_bytes(g), "round trip");
  for (const char* name : {"f32", "f64", "i64", "i32", "i16", "i8", "u8", "u16", "u32", "u64", "bool", "f16"}) {
    for (const std::string prefix : {"raw_", "typed_"}) {
      SCOPED_TRACE(prefix + name);
      ASSERT_TRUE(g.is_initializer(prefix + name));
      const Tensor& t = g.initializers.at(prefix + name);
      EXPECT_STREQ(dtype_name(t.dtype()), name);
      EXPECT_EQ(t.shape(), (Shape{2, 3}));
      if (t.dtype() == DType::F16) {
        // 0..5 as IEEE half bit patterns.
        const uint16_t want[] = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400, 0x4500};
        for (int i = 0; i < 6; ++i) EXPECT_EQ(static_cast<const uint16_t*>(t.raw())[i], want[i]);
      } else if (t.dtype() == DType::U16 || t.dtype() == DType::U32 || t.dtype() == DType::U64 ||
                 t.dtype() == DType::I16) {
        const auto* p = static_cast<const unsigned char*>(t.raw());
        for (int i = 0; i < 6; ++i) EXPECT_EQ(p[i * dtype_size(t.dtype())], i);  // little-endian low byte
      } else {
        auto v = t.as_doubles();
        for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], t.dtype() == DType::Bool ? i % 2 : i);
      }
      const Tensor& u = back.initializers.at(prefix + name);
      ASSERT_EQ(u.dtype(), t.dtype());
      ASSERT_EQ(u.nbytes(), t.nbytes());
      EXPECT_EQ(std::memcmp(u.raw(), t.raw(), t.nbytes()), 0);
    }
  }
}

TEST(OnnxIo, RoundTripKeepsModelAndIsCheckerValid) {
  std::string dir = temp_dir("onnx_io_roundtrip");
  run_onnx_python(dir, kTinyModel);
  Graph g = load_onnx(dir + "/tiny.onnx");
  save_onnx(g, dir + "/saved.onnx");
  Graph h = load_onnx(dir + "/saved.onnx");
  EXPECT_EQ(print_text(h), print_text(g));
  EXPECT_EQ(h.inputs, g.inputs);
  EXPECT_EQ(h.outputs, g.outputs);
  for (const auto& [name, t] : g.initializers) {
    ASSERT_TRUE(h.is_initializer(name)) << name;
    EXPECT_EQ(std::memcmp(h.initializers.at(name).raw(), t.raw(), t.nbytes()), 0) << name;
  }
  expect_python_valid(dir + "/saved.onnx");
  // The same numbers through onnxruntime-free means: Python re-evaluates nothing, but the proto must
  // carry the symbolic batch dimension and every initializer as raw data.
  run_onnx_python(dir, R"(
m = onnx.load('saved.onnx')
assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == 'N', m.graph.input[0]
assert len(m.graph.input) == 1, [i.name for i in m.graph.input]
assert all(len(t.raw_data) > 0 for t in m.graph.initializer)
assert {(o.domain, o.version) for o in m.opset_import} == {('', 13)}, m.opset_import
)");
}

// A graph with graphrun ops and a standard training op, built in C++ without intermediate types.
Graph training_like_graph() {
  Graph g;
  g.name = "train_step";
  g.opsets[""] = 17;
  g.inputs = {"dY", "X"};
  ValueInfo dy;
  dy.dtype = DType::F32;
  dy.has_shape = true;
  dy.shape = {Dim(std::string("N")), Dim(2), Dim(4), Dim(4)};
  g.values["dY"] = dy;
  ValueInfo x = dy;
  x.shape = {Dim(std::string("N")), Dim(1), Dim(6), Dim(6)};
  g.values["X"] = x;
  g.initializers["W"] = testing::random_tensor({2, 1, 3, 3}, 1);
  g.initializers["V"] = Tensor(DType::F32, {2, 1, 3, 3});
  g.initializers["lr"] = Tensor::scalar<float>(0.1f);
  g.initializers["step"] = Tensor::scalar<int64_t>(0);
  g.initializers["bshape"] = Tensor::from_vector<int64_t>({1}, {2});
  Node conv_grad;
  conv_grad.name = "conv_grad";
  conv_grad.op_type = "ConvGrad";
  conv_grad.domain = kGraphrunDomain;
  conv_grad.inputs = {"dY", "X", "W"};
  conv_grad.outputs = {"", "dW", "dB"};
  conv_grad.attrs["kernel_shape"] = Attribute::Ints({3, 3});
  g.add_node(conv_grad);
  Node allreduce;
  allreduce.name = "allreduce";
  allreduce.op_type = "AllReduce";
  allreduce.domain = kGraphrunDomain;
  allreduce.inputs = {"dW", "dB"};
  allreduce.outputs = {"dW_sum", "dB_sum"};
  g.add_node(allreduce);
  Node sum;
  sum.name = "sum_to_shape";
  sum.op_type = "SumToShape";
  sum.domain = kGraphrunDomain;
  sum.inputs = {"dB_sum", "bshape"};
  sum.outputs = {"dB_shaped"};
  g.add_node(sum);
  Node momentum;
  momentum.name = "momentum";
  momentum.op_type = "Momentum";
  momentum.domain = kTrainingDomain;
  momentum.inputs = {"lr", "step", "W", "dW_sum", "V"};
  momentum.outputs = {"W_new", "V_new"};
  momentum.attrs["alpha"] = Attribute::Float(0.9f);
  momentum.attrs["beta"] = Attribute::Float(1.0f);
  momentum.attrs["mode"] = Attribute::Str("standard");
  momentum.attrs["norm_coefficient"] = Attribute::Float(0.0f);
  g.add_node(momentum);
  g.outputs = {"W_new", "V_new", "dB_shaped"};
  return g;
}

TEST(OnnxIo, InferShapesTypesGraphrunAndTrainingOps) {
  Graph g = training_like_graph();
  ValueInfo keep;  // known info must survive inference
  keep.dtype = DType::F32;
  keep.has_shape = true;
  keep.shape = {Dim(std::string("M")), Dim(3)};
  g.values["unrelated"] = keep;
  ValueInfo rank_only;  // gaps are filled
  rank_only.dtype = DType::F32;
  rank_only.has_shape = true;
  rank_only.shape = {Dim(), Dim(1), Dim(), Dim(3)};
  g.values["dW"] = rank_only;
  infer_shapes(g);
  EXPECT_EQ(g.values.at("unrelated").str(), "f32[M,3]");
  EXPECT_EQ(g.values.at("X").str(), "f32[N,1,6,6]");
  EXPECT_EQ(g.values.at("dW").str(), "f32[2,1,3,3]");
  EXPECT_EQ(g.values.at("dB").str(), "f32[2]");
  EXPECT_EQ(g.values.at("dW_sum").str(), "f32[2,1,3,3]");
  EXPECT_EQ(g.values.at("dB_sum").str(), "f32[2]");
  EXPECT_EQ(g.values.at("dB_shaped").str(), "f32[2]");
  EXPECT_EQ(g.values.at("W_new").str(), "f32[2,1,3,3]");
  EXPECT_EQ(g.values.count(""), 0u);
}

TEST(OnnxIo, SavesGraphrunOpsWithDomainImportsAndChecks) {
  std::string dir = temp_dir("onnx_io_graphrun_ops");
  Graph g = training_like_graph();  // outputs have no types yet: export infers them
  save_onnx(g, dir + "/step.onnx");
  expect_python_valid(dir + "/step.onnx");
  run_onnx_python(dir, R"(
m = onnx.load('step.onnx')
ops = {(o.domain, o.version) for o in m.opset_import}
assert ops == {('', 17), ('ai.graphrun', 1), ('ai.onnx.preview.training', 1)}, ops
types = {v.name: v.type.tensor_type for v in list(m.graph.output) + list(m.graph.value_info)}
assert [d.dim_value for d in types['W_new'].shape.dim] == [2, 1, 3, 3]
assert len(types['dB'].shape.dim) == 1 and types['dB'].shape.dim[0].dim_value == 2
)");
  Graph h = load_onnx(dir + "/step.onnx");
  EXPECT_EQ(h.nodes.size(), g.nodes.size());
  EXPECT_EQ(h.nodes[0].outputs[0], "");  // unused optional output stays absent
  EXPECT_EQ(h.nodes[0].domain, kGraphrunDomain);
  EXPECT_EQ(h.opset(kGraphrunDomain), 1);
  EXPECT_EQ(h.values.at("dW").str(), "f32[2,1,3,3]");
  EXPECT_EQ(h.inputs, g.inputs);
}

TEST(OnnxIo, SaveRefusesAnInvalidModel) {
  std::string dir = temp_dir("onnx_io_invalid_save");
  Graph g = training_like_graph();
  g.nodes[0].attrs["group"] = Attribute::Str("two");  // ConvGrad's group is an int
  try {
    save_onnx(g, dir + "/bad.onnx");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(dir + "/bad.onnx"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not valid ONNX"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  Graph h = training_like_graph();
  h.nodes.push_back(h.nodes[1]);  // a value produced twice
  EXPECT_THROW(save_onnx(h, dir + "/bad2.onnx"), Error);
}

// Expects loading `path` to fail with one line naming the file and containing `what`.
void expect_load_error(const std::string& path, const std::string& what) {
  try {
    load_onnx(path);
    ADD_FAILURE() << path << ": loaded, expected an error about " << what;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// A Gemm model whose weight (8 KiB) and bias (256 B) onnx writes as external data, in one file or one per tensor.
const char* kExternalModel = R"(
import os
X = helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 32])
Y = helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N', 64])
W = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32), 'W')
B = numpy_helper.from_array(np.linspace(-1, 1, 64, dtype=np.float32), 'B')
g = helper.make_graph([helper.make_node('Gemm', ['x', 'W', 'B'], ['y'], transB=1)], 'gemm', [X], [Y], [W, B])
m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])
onnx.save(m, 'inline.onnx')
# (onnx.save moves a model's tensors out in place: each form starts from the file)
onnx.save(onnx.load('inline.onnx'), 'one.onnx', save_as_external_data=True, all_tensors_to_one_file=True,
          location='one.data', size_threshold=0)
os.makedirs('sub', exist_ok=True)
onnx.save(onnx.load('inline.onnx'), 'sub/many.onnx', save_as_external_data=True, all_tensors_to_one_file=False,
          size_threshold=0)
)";

// ONNX's external data, as onnx.save writes it past protobuf's 2 GiB (and torch.onnx.export for large
// models): read relative to the model's folder, whatever the working directory; written back beside a
// saved model, in a form onnx itself reads.
TEST(OnnxIo, ExternalDataIsReadAndWrittenBack) {
  const std::string dir = temp_dir("onnx_io_external");
  run_onnx_python(dir, kExternalModel);
  const Graph inline_g = load_onnx(dir + "/inline.onnx");
  EXPECT_FALSE(inline_g.external_data);
  for (const std::string file : {"/one.onnx", "/sub/many.onnx"}) {
    const Graph g = load_onnx(dir + file);
    EXPECT_TRUE(g.external_data) << file;
    ASSERT_EQ(g.initializers.size(), 2u) << file;
    for (const auto& [name, t] : inline_g.initializers) {
      ASSERT_TRUE(g.initializers.count(name)) << file << " " << name;
      EXPECT_EQ(g.initializers.at(name).to_vector<float>(), t.to_vector<float>()) << file << " " << name;
    }
  }
  // Written back: the weight in saved.onnx.data, the bias (under 1 KiB) inside; onnx reads both.
  save_onnx(load_onnx(dir + "/sub/many.onnx"), dir + "/saved.onnx");
  EXPECT_TRUE(std::ifstream(dir + "/saved.onnx.data").good());
  const Graph back = load_onnx(dir + "/saved.onnx");
  EXPECT_TRUE(back.external_data);
  EXPECT_EQ(back.initializers.at("W").to_vector<float>(), inline_g.initializers.at("W").to_vector<float>());
  run_onnx_python(dir, R"(
locs = {t.name: t.data_location for t in onnx.load('saved.onnx', load_external_data=False).graph.initializer}
assert locs == {'W': TensorProto.EXTERNAL, 'B': TensorProto.DEFAULT}, locs
onnx.checker.check_model('saved.onnx', full_check=True)
m = onnx.load('saved.onnx')
ref = {t.name: numpy_helper.to_array(t) for t in onnx.load('inline.onnx').graph.initializer}
for t in m.graph.initializer:
    assert (numpy_helper.to_array(t) == ref[t.name]).all(), t.name
)");
  // A model without external data is written without it.
  save_onnx(inline_g, dir + "/plain.onnx");
  EXPECT_FALSE(std::ifstream(dir + "/plain.onnx.data").good());
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Saves `g` in a child process whose files may not grow past 4 KiB (RLIMIT_FSIZE: a write past it fails
// with EFBIG, as one fails with ENOSPC on a full disk); returns the error line ("" when it saved).
std::string save_with_file_size_limit(const Graph& g, const std::string& path) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string msg;
    try {
      save_onnx(g, path);
    } catch (const std::exception& e) {
      msg = e.what();
    }
    if (::write(fds[1], msg.data(), msg.size()) < 0) ::_exit(1);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(k));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return msg;
}

std::vector<std::string> temporaries_in(const std::string& dir) {
  std::vector<std::string> r;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos) r.push_back(e.path().filename().string());
  return r;
}

// save_onnx wrote in place (O_TRUNC): a failed write (a full disk) left a truncated or empty file where the
// good model was, even the model train --save was training. It writes beside the target and renames once
// the bytes are on disk: the old file stays as it was, the temporary file goes, and the error is one line
// naming the file and the reason (it was "PATH: write error").
TEST(OnnxIo, AFailedSaveLeavesTheFileItWouldReplaceAsItWas) {
  const std::string dir = temp_dir("onnx_io_failed_save");
  run_onnx_python(dir, kExternalModel);
  const Graph g = load_onnx(dir + "/inline.onnx");  // 8 KiB of weights: past the limit
  const std::string path = dir + "/model.onnx";
  save_onnx(g, path);
  const std::string good = file_bytes(path);
  Graph changed = g;
  changed.initializers["W"] = testing::random_tensor({64, 32}, 7);
  EXPECT_EQ(save_with_file_size_limit(changed, path), path + ": cannot write: File too large");
  EXPECT_EQ(file_bytes(path), good);
  EXPECT_EQ(temporaries_in(dir), std::vector<std::string>{});
  // With external data: neither the model nor its weights change (the weights fail first).
  const Graph ext = load_onnx(dir + "/one.onnx");
  save_onnx(ext, dir + "/ext.onnx");
  const std::string good_model = file_bytes(dir + "/ext.onnx"), good_data = file_bytes(dir + "/ext.onnx.data");
  Graph ext_changed = ext;
  ext_changed.initializers["W"] = testing::random_tensor({64, 32}, 7);
  EXPECT_EQ(save_with_file_size_limit(ext_changed, dir + "/ext.onnx"),
            dir + "/ext.onnx.data: cannot write: File too large");
  EXPECT_EQ(file_bytes(dir + "/ext.onnx"), good_model);
  EXPECT_EQ(file_bytes(dir + "/ext.onnx.data"), good_data);
  EXPECT_EQ(temporaries_in(dir), std::vector<std::string>{});
  // Saved: the file replaced keeps its permissions, a new one gets the usual (0666 less the umask), and a
  // symbolic link stays a link to the file it named.
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  save_onnx(changed, path);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(load_onnx(path).initializers.at("W").to_vector<float>(), changed.initializers.at("W").to_vector<float>());
  const mode_t mask = ::umask(0);
  ::umask(mask);
  save_onnx(g, dir + "/new.onnx");
  ASSERT_EQ(::stat((dir + "/new.onnx").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u & ~mask);
  ASSERT_EQ(::symlink("model.onnx", (dir + "/link.onnx").c_str()), 0);
  save_onnx(g, dir + "/link.onnx");
  ASSERT_EQ(::lstat((dir + "/link.onnx").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(file_bytes(path), good);
  EXPECT_EQ(temporaries_in(dir), std::vector<std::string>{});
  // A device is written into, never replaced by a file.
  save_onnx(g, "/dev/null");
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // A folder that is not there: one line.
  try {
    save_onnx(g, dir + "/no/such/m.onnx");
    ADD_FAILURE() << "saved into a folder that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/no/such/m.onnx: cannot write: No such file or directory");
  }
}

// Large float weights stay out of the ModelProto while onnx checks and infers (a typed input stands in for
// each), so they are held once. Every layout comes back bitwise, in the model's order, and as a weight,
// not an input: raw and typed data, float16, one listed among the inputs as old exporters do, integers
// (which stay for inference to read), and small ones.
TEST(OnnxIo, LargeWeightsComeBackBitwiseWhateverTheirLayout) {
  const std::string dir = temp_dir("onnx_io_large_weights");
  run_onnx_python(dir, R"(
r = np.random.RandomState(0)
W = r.randn(64, 48).astype(np.float32)
typed = helper.make_tensor('T', TensorProto.FLOAT, [48, 48], r.randn(48 * 48).astype(np.float32).tolist())
H = numpy_helper.from_array(r.randn(48, 32).astype(np.float16), 'H')
S = numpy_helper.from_array(np.array([-1, 32], np.int64), 'S')
idx = numpy_helper.from_array(r.randint(0, 64, 1000).astype(np.int64), 'idx')
B = numpy_helper.from_array(r.randn(48).astype(np.float32), 'B')
nodes = [helper.make_node('Gather', ['W', 'idx'], ['g']), helper.make_node('ReduceMean', ['g'], ['m'], axes=[0]),
         helper.make_node('Add', ['x', 'm'], ['a']), helper.make_node('Add', ['a', 'B'], ['b']),
         helper.make_node('MatMul', ['b', 'T'], ['c']), helper.make_node('Cast', ['c'], ['c16'], to=TensorProto.FLOAT16),
         helper.make_node('MatMul', ['c16', 'H'], ['d']), helper.make_node('Cast', ['d'], ['e'], to=TensorProto.FLOAT),
         helper.make_node('Reshape', ['e', 'S'], ['y'])]
g = helper.make_graph(nodes, 'weights', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 48]),
                                         helper.make_tensor_value_info('W', TensorProto.FLOAT, [64, 48])],
                      [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N', 32])],
                      [numpy_helper.from_array(W, 'W'), typed, H, S, idx, B])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), 'weights.onnx')
x = r.randn(5, 48).astype(np.float32)
np.save('x.npy', x)
b = x + W[numpy_helper.to_array(idx)].mean(0) + numpy_helper.to_array(B)
c16 = (b @ numpy_helper.to_array(typed)).astype(np.float16)
np.save('want.npy', (c16.astype(np.float32) @ numpy_helper.to_array(H).astype(np.float32)).astype(np.float16).astype(np.float32))
dup = onnx.load('weights.onnx'); dup.graph.initializer.append(numpy_helper.from_array(W, 'T')); onnx.save(dup, 'dup.onnx')
)");
  const Graph g = load_onnx(dir + "/weights.onnx");
  EXPECT_EQ(g.inputs, std::vector<std::string>{"x"});  // 'W', listed among the inputs, is a weight
  EXPECT_EQ(g.initializers.size(), 6u);
  EXPECT_EQ(g.initializers.at("H").dtype(), DType::F16);
  const Tensor y = runtime::Executor(g).run({{"x", read_npy(dir + "/x.npy")}}).at("y");
  const Tensor want = read_npy(dir + "/want.npy");
  float largest = 0;
  for (float v : want.to_vector<float>()) largest = std::max(largest, std::abs(v));
  EXPECT_LE(testing::max_abs_diff(y, want), largest / 512);  // two float16 steps: its products round once
  for (const bool external : {false, true}) {
    Graph h = g;
    h.external_data = external;
    save_onnx(h, dir + "/saved.onnx");
    EXPECT_EQ(std::ifstream(dir + "/saved.onnx.data").good(), external);
    run_onnx_python(dir, std::string("external = ") + (external ? "True" : "False") + R"(
ref = onnx.load('weights.onnx').graph.initializer
m = onnx.load('saved.onnx')
onnx.checker.check_model('saved.onnx', full_check=True)
assert [i.name for i in m.graph.input] == ['x'], m.graph.input
assert sorted(t.name for t in m.graph.initializer) == sorted(t.name for t in ref)
want = {t.name: numpy_helper.to_array(t) for t in ref}
for t in m.graph.initializer:
    got = numpy_helper.to_array(t)
    assert got.dtype == want[t.name].dtype and got.shape == want[t.name].shape and (got == want[t.name]).all(), t.name
for t in onnx.load('saved.onnx', load_external_data=False).graph.initializer:
    assert (t.data_location == TensorProto.EXTERNAL) == (external and want[t.name].nbytes >= 1024), t.name
)");
    const Graph back = load_onnx(dir + "/saved.onnx");
    for (const auto& [name, t] : g.initializers) {
      ASSERT_TRUE(back.initializers.count(name)) << name;
      const Tensor& b = back.initializers.at(name);
      EXPECT_EQ(b.shape(), t.shape()) << name;
      EXPECT_EQ(std::memcmp(b.raw(), t.raw(), t.nbytes()), 0) << name;
    }
    std::remove((dir + "/saved.onnx.data").c_str());
  }
  expect_load_error(dir + "/dup.onnx", "initializer 'T' is defined twice");
}

// External data is untrusted like the model: it never leaves the model's folder, and a file too short
// for its tensors is refused before anything is allocated for them.
TEST(OnnxIo, BadExternalDataGivesOneClearLine) {
  const std::string dir = temp_dir("onnx_io_external_bad");
  run_onnx_python(dir, std::string(kExternalModel) + R"(
def variant(name, **entries):
    v = onnx.load('one.onnx', load_external_data=False)
    w = [t for t in v.graph.initializer if t.name == 'W'][0]
    for key, value in entries.items():
        if key == 'dims':
            del w.dims[:]; w.dims.extend(value); continue
        kv = [e for e in w.external_data if e.key == key]
        if value is None:
            for e in kv: w.external_data.remove(e)
        elif kv: kv[0].value = value
        else: w.external_data.add(key=key, value=value)
    onnx.save(v, name)
variant('absolute.onnx', location='/etc/hostname')
variant('parent.onnx', location='../one.data')
variant('deep_parent.onnx', location='sub/../../one.data')
variant('missing.onnx', location='nowhere.data')
variant('folder.onnx', location='sub')
variant('no_location.onnx', location=None)
variant('offset_past.onnx', offset='1000000')
variant('offset_text.onnx', offset='12abc')
variant('offset_negative.onnx', offset='-4')
variant('length_wrong.onnx', length='100')
variant('huge.onnx', dims=[1 << 40, 1 << 20], length=None)
variant('large.onnx', dims=[1 << 20, 1 << 10], length=None)
)");
  expect_load_error(dir + "/absolute.onnx", "is not a path relative to the model's folder");
  expect_load_error(dir + "/parent.onnx", "leaves the model's folder");
  expect_load_error(dir + "/deep_parent.onnx", "leaves the model's folder");
  expect_load_error(dir + "/missing.onnx", "nowhere.data: no such file");
  expect_load_error(dir + "/folder.onnx", "is not a regular file");
  expect_load_error(dir + "/no_location.onnx", "no location");
  expect_load_error(dir + "/offset_past.onnx", "too few for 8192 at offset 1000000");
  expect_load_error(dir + "/offset_text.onnx", "offset '12abc' is not a byte count");
  expect_load_error(dir + "/offset_negative.onnx", "offset '-4' is not a byte count");
  expect_load_error(dir + "/length_wrong.onnx", "length 100 bytes, but f32[64,32] needs 8192");
  expect_load_error(dir + "/huge.onnx", "initializer 'W' (external data): f32[1099511627776,1048576] has");
  expect_load_error(dir + "/large.onnx", "too few for 4294967296 at offset 0");  // 4 GiB: refused, not allocated
  // From memory there is no folder to look in.
  std::ifstream f(dir + "/one.onnx", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  try {
    load_onnx_bytes(bytes, "one.onnx");
    ADD_FAILURE() << "a model with external data loaded from memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("load it from its file"), std::string::npos) << e.what();
  }
}

// Model-local functions as module-keeping exporters write them (torch's dynamo exporter, onnxscript): Block calls
// LinearAct twice, once passing its attribute reference `alpha` on and once without (LeakyRelu's default then).
const char* kFunctionModel = R"(
D = 'pkg.model'
def ref(name, attr, kind=onnx.AttributeProto.FLOAT):
    a = onnx.AttributeProto(); a.name = name; a.ref_attr_name = attr; a.type = kind; return a
leaky = helper.make_node('LeakyRelu', ['h'], ['y'], name='act'); leaky.attribute.append(ref('alpha', 'alpha'))
linear_act = helper.make_function(D, 'LinearAct', ['x', 'w', 'b'], ['y'],
    [helper.make_node('Gemm', ['x', 'w', 'b'], ['h'], name='gemm', transB=1), leaky],
    [helper.make_opsetid('', 17)], ['alpha'])
first = helper.make_node('LinearAct', ['x', 'w1', 'b1'], ['t'], name='first', domain=D)
first.attribute.append(ref('alpha', 'alpha'))
block = helper.make_function(D, 'Block', ['x', 'w1', 'b1', 'w2', 'b2'], ['y'],
    [first, helper.make_node('LinearAct', ['t', 'w2', 'b2'], ['y'], name='second', domain=D)],
    [helper.make_opsetid('', 17), helper.make_opsetid(D, 1)], ['alpha'])
rng = np.random.default_rng(0)
W1, B1 = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
W2, B2 = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
inits = [numpy_helper.from_array(v, n) for v, n in ((W1, 'W1'), (B1, 'B1'), (W2, 'W2'), (B2, 'B2'))]
def model(nodes, functions, opsets=(17, 1)):
    g = helper.make_graph(nodes, 'fn', [helper.make_tensor_value_info('image', TensorProto.FLOAT, ['N', 6])],
                          [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['N', 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', opsets[0]), helper.make_opsetid(D, opsets[1])],
                             functions=functions)
call = helper.make_node('Block', ['image', 'W1', 'B1', 'W2', 'B2'], ['logits'], name='block', domain=D, alpha=0.2)
m = model([call], [linear_act, block])
onnx.checker.check_model(m)
onnx.save(m, 'functions.onnx')
x = rng.standard_normal((4, 6)).astype(np.float32)
leaky_np = lambda v, a: np.where(v > 0, v, a * v)
np.save('x.npy', x)
np.save('want.npy', leaky_np(leaky_np(x @ W1.T + B1, 0.2) @ W2.T + B2, 0.01).astype(np.float32))

# IR 9's attribute defaults (FunctionProto.attribute_proto, field 11, newer than onnx 1.12's protobuf: appended as
# raw bytes): Scaled multiplies by its `factor`, default 3.0; one call gives 0.5, one relies on the default.
factor = helper.make_attribute('factor', 3.0).SerializeToString()
mul = helper.make_node('Mul', ['x', 'k'], ['y'])
const = helper.make_node('Constant', [], ['k']); const.attribute.append(ref('value_float', 'factor'))
scaled = onnx.FunctionProto()
scaled.ParseFromString(helper.make_function(D, 'Scaled', ['x'], ['y'], [const, mul], [helper.make_opsetid('', 17)],
                                            ['factor']).SerializeToString() + bytes([0x5a, len(factor)]) + factor)
g = helper.make_graph([helper.make_node('Scaled', ['image'], ['half'], domain=D, factor=0.5),
                       helper.make_node('Scaled', ['half'], ['logits'], domain=D)], 'defaults',
                      [helper.make_tensor_value_info('image', TensorProto.FLOAT, ['N', 6])],
                      [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['N', 6])])
md = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17), helper.make_opsetid(D, 1)])
md.functions.add().CopyFrom(scaled)
onnx.save(md, 'defaults.onnx')

# IR 10's overloads (FunctionProto.overload, field 13; NodeProto.overload, field 8; appended as raw bytes):
# Act has a relu and a tanh overload; the calls pick relu, tanh and the unnamed one (an identity).
def with_field(msg, number, text):
    out = type(msg)(); out.ParseFromString(msg.SerializeToString() + bytes([number << 3 | 2, len(text)]) + text.encode())
    return out
act = lambda op, over: with_field(helper.make_function(D, 'Act', ['x'], ['y'], [helper.make_node(op, ['x'], ['y'])],
                                                       [helper.make_opsetid('', 17)]), 13, over)
plain = helper.make_function(D, 'Act', ['x'], ['y'], [helper.make_node('Identity', ['x'], ['y'])], [helper.make_opsetid('', 17)])
calls = [with_field(helper.make_node('Act', ['image'], ['r'], name='r', domain=D), 8, 'relu'),
         with_field(helper.make_node('Act', ['r'], ['t'], name='t', domain=D), 8, 'tanh'),
         helper.make_node('Act', ['t'], ['logits'], name='i', domain=D)]
g = helper.make_graph(calls, 'overloads', [helper.make_tensor_value_info('image', TensorProto.FLOAT, ['N', 6])],
                      [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['N', 6])])
mo = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17), helper.make_opsetid(D, 1)])
mo.ir_version = 10
for f in (act('Relu', 'relu'), act('Tanh', 'tanh'), plain): mo.functions.add().CopyFrom(f)
onnx.save(mo, 'overloads.onnx')
mo.graph.node[1].CopyFrom(with_field(helper.make_node('Act', ['r'], ['t'], name='t', domain=D), 8, 'gelu'))
onnx.save(mo, 'overload_missing.onnx')
mo.graph.node[1].CopyFrom(calls[1]); mo.functions.add().CopyFrom(act('Sigmoid', 'relu'))
onnx.save(mo, 'overload_twice.onnx')

# Hostile or foreign: a function calling itself, one reading a value nobody defines, one of another opset,
# and calls that double at every level (2^24 nodes: refused before any is made).
selfcall = helper.make_function(D, 'Loop', ['x'], ['y'], [helper.make_node('Loop', ['x'], ['y'], domain=D)],
                                [helper.make_opsetid('', 17)])
onnx.save(model([helper.make_node('Loop', ['image'], ['logits'], name='spin', domain=D)], [selfcall]), 'recursive.onnx')
dangling = helper.make_function(D, 'Dangling', ['x'], ['y'], [helper.make_node('Add', ['x', 'nowhere'], ['y'])],
                                [helper.make_opsetid('', 17)])
onnx.save(model([helper.make_node('Dangling', ['image'], ['logits'], domain=D)], [dangling]), 'dangling_fn.onnx')
old = helper.make_function(D, 'Old', ['x'], ['y'], [helper.make_node('Relu', ['x'], ['y'])], [helper.make_opsetid('', 13)])
onnx.save(model([helper.make_node('Old', ['image'], ['logits'], domain=D)], [old]), 'other_opset.onnx')
levels = [helper.make_function(D, 'F24', ['x'], ['y'], [helper.make_node('Relu', ['x'], ['y'])], [helper.make_opsetid('', 17)])]
for i in range(23, -1, -1):
    levels.append(helper.make_function(D, 'F%d' % i, ['x'], ['y'],
        [helper.make_node('F%d' % (i + 1), ['x'], ['t'], domain=D), helper.make_node('F%d' % (i + 1), ['t'], ['y'], domain=D)],
        [helper.make_opsetid('', 17), helper.make_opsetid(D, 1)]))
onnx.save(model([helper.make_node('F0', ['image'], ['logits'], domain=D)], levels), 'bomb.onnx')
chain = [helper.make_function(D, 'G%d' % i, ['x'], ['y'], [helper.make_node('G%d' % (i + 1), ['x'], ['y'], domain=D)],
                              [helper.make_opsetid('', 17), helper.make_opsetid(D, 1)]) for i in range(100000)]
chain.append(helper.make_function(D, 'G100000', ['x'], ['y'], [helper.make_node('Relu', ['x'], ['y'])],
                                  [helper.make_opsetid('', 17)]))
onnx.save(model([helper.make_node('G0', ['image'], ['logits'], domain=D)], chain), 'deep.onnx')
)";

TEST(OnnxIo, ModelLocalFunctionsAreInlined) {
  const std::string dir = temp_dir("onnx_io_functions");
  run_onnx_python(dir, kFunctionModel);
  const Graph g = load_onnx(dir + "/functions.onnx");
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) {
    EXPECT_EQ(n.domain, "") << n.describe();
    ops.push_back(n.op_type);
  }
  EXPECT_EQ(ops, (std::vector<std::string>{"Gemm", "LeakyRelu", "Gemm", "LeakyRelu"}));
  EXPECT_FALSE(g.opsets.count("pkg.model"));  // the functions' domain left with them
  runtime::Executor ex(g);
  const Tensor got = ex.run({{"image", read_npy(dir + "/x.npy")}}).at("logits");
  EXPECT_LE(testing::max_abs_diff(got, read_npy(dir + "/want.npy")), 1e-5);
  // It trains: every inlined node has a gradient, and the float64 gradient check passes.
  auto r = run_command(testing::graphrun_cli() + " check " + dir + "/functions.onnx 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;

  {  // x * 0.5 * 3.0 (the default)
    runtime::Executor dx(load_onnx(dir + "/defaults.onnx"));
    const Tensor x = read_npy(dir + "/x.npy");
    const Tensor y = dx.run({{"image", x}}).at("logits");
    const auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
    ASSERT_EQ(xv.size(), yv.size());
    for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(yv[i], xv[i] * 1.5f) << i;
  }
  {  // the overloads: identity(tanh(relu(x)))
    const Graph go = load_onnx(dir + "/overloads.onnx");
    std::vector<std::string> got_ops;
    for (const Node& n : go.nodes) got_ops.push_back(n.op_type);
    EXPECT_EQ(got_ops, (std::vector<std::string>{"Relu", "Tanh", "Identity"}));
    const Tensor x = read_npy(dir + "/x.npy");
    const Tensor y = runtime::Executor(go).run({{"image", x}}).at("logits");
    const auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
    ASSERT_EQ(xv.size(), yv.size());
    for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(yv[i], std::tanh(std::max(xv[i], 0.f))) << i;
  }
  expect_load_error(dir + "/overload_missing.onnx", "node 't' calls overload 'gelu' of Act, which the model's functions do not define");
  expect_load_error(dir + "/overload_twice.onnx", "function Act of domain 'pkg.model' overload 'relu' is defined twice");
  expect_load_error(dir + "/recursive.onnx", "function Loop calls itself");
  expect_load_error(dir + "/dangling_fn.onnx", "function Dangling reads 'nowhere'");
  expect_load_error(dir + "/other_opset.onnx", "function Old imports opset 13 of domain '', the model 17");
  expect_load_error(dir + "/deep.onnx", "function calls nest over 64 deep (at G64)");  // not a stack overflow
  expect_load_error(dir + "/bomb.onnx", "inlining the model's functions would make over 262144 nodes");
}

// nn.EmbeddingBag exports a Loop over the bags; graphrun computes it without the loop on load, with the Loop's ONNX
// meaning: each bag reduces the rows of text[starts[i]:ends[i]] (Slice's reading of bounds: a negative one counts
// from the end, one past the end is clamped), an empty bag giving 0 (sum), NaN (mean, 0 / 0) or -inf (max) where torch writes 0. The expected values
// come from numpy doing what the Loop body says, bag by bag; torch's own where every bag has tokens. The 1-D
// text + offsets form, per_sample_weights, include_last_offset, opsets 11 and 17. Any other Loop is refused.
TEST(OnnxIo, EmbeddingBagLoopsRunWithoutTheLoop) {
  if (run_command(python() + " -c 'import torch' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks torch";
  const std::string dir = temp_dir("onnx_bag_loops");
  run_onnx_python(dir, R"(
import torch
torch.manual_seed(0)
class Bag(torch.nn.Module):
    def __init__(s, mode, last):
        super().__init__()
        s.bag = torch.nn.EmbeddingBag(30, 5, mode=mode, include_last_offset=last)
    def forward(s, text, offsets, w=None):
        return s.bag(text, offsets, per_sample_weights=w)
text = torch.randint(0, 30, (12,))
cases = []
for mode, psw, last, opset in [('sum', True, False, 17), ('mean', False, False, 11), ('max', False, True, 17),
                                ('mean', False, True, 13), ('sum', False, False, 11)]:
    m = Bag(mode, last)
    offsets = torch.tensor([0, 4, 4, 9] + ([12] if last else []))
    w = torch.rand(12) if psw else None
    args = (text, offsets) + ((w,) if psw else ())
    name = f'{mode}_{int(psw)}_{int(last)}_{opset}'
    torch.onnx.export(m, args, name + '.onnx', opset_version=opset, input_names=['text', 'offsets'] + (['w'] if psw else []),
                      output_names=['y'], do_constant_folding=False, dynamic_axes={'text': [0], 'offsets': [0]})
    np.save(name + '_torch.npy', m(*args).detach().numpy())
    # The Loop's meaning, bag by bag; then again with an offset past the end of the text (an empty last bag).
    for tag, off in (('', offsets.numpy()), ('_past', np.array([0, 4, -3, 20] + ([25] if last else []), np.int64))):
        starts, ends = (off[:-1], off[1:]) if last else (off, np.append(off[1:], 12))
        wt = m.bag.weight.detach().numpy().astype(np.float64)
        rows = []
        for s0, e0 in zip(starts, ends):
            r = wt[text.numpy()[s0:e0]]
            if psw:
                r = r * w.numpy()[s0:e0, None]
            rows.append(r.sum(0) if mode == 'sum' else (r.sum(0) / len(r) if len(r) else np.full(5, np.nan))
                        if mode == 'mean' else (r.max(0) if len(r) else np.full(5, -np.inf)))
        np.save(name + tag + '_loop.npy', np.array(rows, np.float32))
        np.save(name + tag + '_offsets.npy', off)
    np.save('text.npy', text.numpy())
    if psw:
        np.save('w.npy', w.numpy())
    cases.append(name)
open('cases.txt', 'w').write('\n'.join(cases))
# A Loop that carries a value from one iteration to the next is no bag loop: refused.
body = helper.make_graph([helper.make_node('Add', ['acc_in', 'x'], ['acc_out']), helper.make_node('Identity', ['c'], ['c_out'])],
                         'body', [helper.make_tensor_value_info('i', TensorProto.INT64, []),
                                  helper.make_tensor_value_info('c', TensorProto.BOOL, []),
                                  helper.make_tensor_value_info('acc_in', TensorProto.FLOAT, [2])],
                         [helper.make_tensor_value_info('c_out', TensorProto.BOOL, []),
                          helper.make_tensor_value_info('acc_out', TensorProto.FLOAT, [2])])
g = helper.make_graph([helper.make_node('Loop', ['n', '', 'x'], ['y'], body=body, name='accumulate')], 'carried',
                      [helper.make_tensor_value_info('n', TensorProto.INT64, []), helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'carried.onnx')
)");
  std::ifstream list(dir + "/cases.txt");
  int cases = 0;
  for (std::string name; std::getline(list, name); ++cases) {
    SCOPED_TRACE(name);
    const Graph g = load_onnx(dir + "/" + name + ".onnx");
    for (const Node& n : g.nodes) EXPECT_NE(n.op_type, "Loop");
    runtime::Executor ex(g);
    for (const std::string tag : {"", "_past"}) {
      std::map<std::string, Tensor> feeds{{"text", read_npy(dir + "/text.npy")},
                                          {"offsets", read_npy(dir + "/" + name + tag + "_offsets.npy")}};
      if (name.rfind("sum_1", 0) == 0) feeds["w"] = read_npy(dir + "/w.npy");
      const Tensor y = ex.run(feeds).at("y");
      const Tensor want = read_npy(dir + "/" + name + tag + "_loop.npy");
      ASSERT_EQ(y.shape(), want.shape()) << tag;
      const float *a = y.data<float>(), *b = want.data<float>();
      for (int64_t i = 0; i < y.numel(); ++i) {
        if (std::isnan(b[i]) || std::isinf(b[i])) EXPECT_TRUE(std::isnan(b[i]) ? std::isnan(a[i]) : a[i] == b[i]) << tag << " " << i;
        else EXPECT_NEAR(a[i], b[i], 1e-5) << tag << " " << i;
      }
      if (!tag[0] && name.find("sum") == 0) {  // no empty bag gives torch's numbers too (its sums)
        EXPECT_LE(testing::max_abs_diff(y, read_npy(dir + "/" + name + "_torch.npy")), 1e-5);
      }
    }
  }
  EXPECT_EQ(cases, 5);
  expect_load_error(dir + "/carried.onnx", "node 'accumulate' (Loop): its trip count or its condition depends on the input data");
}

// A Loop or Scan whose count is known when the model loads is unrolled into copies of its body, with the ONNX
// meaning (torch.jit.script's loops: Zoo.ScriptedLoopsUnrolled*): a Loop whose body condition stops it before its
// trip count and that stacks scan outputs, nested Loops whose inner trip count and an If depend on the outer iteration number, a Loop that runs
// zero times, Scans reading and writing in both directions along other axes (numpy computes what the ops say).
// A trip count on the data is refused, and so is a count past the unrolling budget, without building it.
TEST(OnnxIo, StaticLoopsAndScansAreUnrolled) {
  const std::string dir = temp_dir("onnx_unroll");
  run_onnx_python(dir, R"(
def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)
def save(nodes, inputs, outputs, name, opset=17, inits=()):
    onnx.save(helper.make_model(helper.make_graph(nodes, name, inputs, outputs, list(inits)),
                                opset_imports=[helper.make_opsetid('', opset)]), name + '.onnx')
i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [], [v])

# acc += x * i while i + 1 < len(x): M = 10 but the condition stops it after len(x) = 4 iterations; scan output acc.
body = helper.make_graph([
    helper.make_node('Cast', ['i'], ['fi'], to=TensorProto.FLOAT),
    helper.make_node('Mul', ['x', 'fi'], ['xi']),
    helper.make_node('Add', ['acc_in', 'xi'], ['acc_out']),
    helper.make_node('Add', ['i', 'one'], ['next']),
    helper.make_node('Shape', ['x'], ['xs']),
    helper.make_node('Gather', ['xs', 'zero'], ['len'], axis=0),
    helper.make_node('Less', ['next', 'len'], ['c_out']),
    helper.make_node('Identity', ['acc_out'], ['acc_scan'])], 'body',
    [vi('i', [], TensorProto.INT64), vi('c', [], TensorProto.BOOL), vi('acc_in', [4])],
    [vi('c_out', [], TensorProto.BOOL), vi('acc_out', [4]), vi('acc_scan', [4])],
    [i64('one', 1), helper.make_tensor('zero', TensorProto.INT64, [], [0])])
save([helper.make_node('Loop', ['M', 'T', 'x'], ['acc', 'stack'], body=body, name='early')], [vi('x', [4])],
     [vi('acc', [4]), vi('stack', [4, 4])], 'early', inits=[i64('M', 10), helper.make_tensor('T', TensorProto.BOOL, [], [1])])
xv = np.arange(1, 5, dtype=np.float32)
acc, rows = xv.copy(), []
for i in range(4):
    acc = acc + xv * i
    rows.append(acc.copy())
np.save('early_x.npy', xv); np.save('early_acc.npy', acc); np.save('early_stack.npy', np.array(rows))

# for i in range(3): (for j in range(i + 1): acc += x); if i == 0: acc = acc * 2  (inner count, If on the outer i)
inner = helper.make_graph([helper.make_node('Add', ['a_in', 'x'], ['a_out']), helper.make_node('Identity', ['ci'], ['co'])],
                          'inner', [vi('j', [], TensorProto.INT64), vi('ci', [], TensorProto.BOOL), vi('a_in', [2])],
                          [vi('co', [], TensorProto.BOOL), vi('a_out', [2])])
then_b = helper.make_graph([helper.make_node('Mul', ['summed', 'two'], ['doubled'])], 'then', [], [vi('doubled', [2])],
                           [helper.make_tensor('two', TensorProto.FLOAT, [], [2.0])])
else_b = helper.make_graph([helper.make_node('Identity', ['summed'], ['same'])], 'else', [], [vi('same', [2])])
outer = helper.make_graph([
    helper.make_node('Add', ['i', 'one'], ['count']),
    helper.make_node('Loop', ['count', '', 'acc_in'], ['summed'], body=inner, name='inner_loop'),
    helper.make_node('Equal', ['i', 'zero'], ['first']),
    helper.make_node('If', ['first'], ['acc_out'], then_branch=then_b, else_branch=else_b, name='first_doubles'),
    helper.make_node('Identity', ['c'], ['c_out'])], 'outer',
    [vi('i', [], TensorProto.INT64), vi('c', [], TensorProto.BOOL), vi('acc_in', [2])],
    [vi('c_out', [], TensorProto.BOOL), vi('acc_out', [2])], [i64('one', 1), i64('zero', 0)])
save([helper.make_node('Loop', ['three', '', 'x'], ['y'], body=outer, name='outer_loop')], [vi('x', [2])], [vi('y', [2])],
     'nested', inits=[i64('three', 3)])
xn = np.array([1.5, -2.0], np.float32)
acc = xn.copy()
for i in range(3):
    for j in range(i + 1):
        acc = acc + xn
    if i == 0:
        acc = acc * 2
np.save('nested_x.npy', xn); np.save('nested_y.npy', acc)

# Zero iterations: the carried value passes through, the scan output is [0, 3] (the body declares [3]).
zb = helper.make_graph([helper.make_node('Neg', ['v_in'], ['v_out']), helper.make_node('Identity', ['c'], ['c_out'])], 'zb',
                       [vi('i', [], TensorProto.INT64), vi('c', [], TensorProto.BOOL), vi('v_in', [3])],
                       [vi('c_out', [], TensorProto.BOOL), vi('v_out', [3])])
zb2 = helper.make_graph(list(zb.node), 'zb2', list(zb.input), [vi('c_out', [], TensorProto.BOOL), vi('v_out', [3]), vi('v_out', [3])])
save([helper.make_node('Loop', ['none', '', 'x'], ['v', 'vs'], body=zb2, name='never')], [vi('x', [3])],
     [vi('v', [3]), vi('vs', [0, 3])], 'zero', inits=[i64('none', 0)])

# Scan (opset 16): states s (cumulative sum of the rows read), scan inputs a read along axis 1 backwards and b along
# axis 0; outputs: s per step along axis 1, and a * b written backwards along axis 0.
sb = helper.make_graph([helper.make_node('Add', ['s_in', 'a_t'], ['s_out']), helper.make_node('Mul', ['a_t', 'b_t'], ['p']),
                        helper.make_node('Identity', ['s_out'], ['s_scan'])], 'sb',
                       [vi('s_in', [2]), vi('a_t', [2]), vi('b_t', [2])], [vi('s_out', [2]), vi('s_scan', [2]), vi('p', [2])])
save([helper.make_node('Scan', ['s0', 'a', 'b'], ['s', 'ss', 'ps'], body=sb, num_scan_inputs=2, scan_input_axes=[1, 0],
                       scan_input_directions=[1, 0], scan_output_axes=[1, 0], scan_output_directions=[0, 1], name='scan')],
     [vi('s0', [2]), vi('a', [2, 3]), vi('b', [3, 2])], [vi('s', [2]), vi('ss', [2, 3]), vi('ps', [3, 2])], 'scan', opset=16)
s0 = np.array([0.5, -1.0], np.float32); a = np.random.rand(2, 3).astype(np.float32); b = np.random.rand(3, 2).astype(np.float32)
s, ss, ps = s0.copy(), [], []
for t in range(3):
    at, bt = a[:, 2 - t], b[t]
    s = s + at
    ss.append(s.copy()); ps.append(at * bt)
for n_, v_ in (('s0', s0), ('a', a), ('b', b), ('s', s), ('ss', np.stack(ss, 1)), ('ps', np.stack(ps[::-1], 0))):
    np.save('scan_%s.npy' % n_, v_)

# A trip count past the budget, with a condition that stays true: refused before anything is built.
save([helper.make_node('Loop', ['huge', '', 'x'], ['v'], body=zb, name='forever')], [vi('x', [3])], [vi('v', [3])],
     'huge', inits=[i64('huge', 10**12)])
)");
  auto npy = [&](const std::string& f) { return read_npy(dir + "/" + f + ".npy"); };
  auto no_control_flow = [](const Graph& g) {
    for (const Node& n : g.nodes) EXPECT_TRUE(n.op_type != "Loop" && n.op_type != "Scan" && n.op_type != "If") << n.describe();
  };
  {
    const Graph g = load_onnx(dir + "/early.onnx");
    no_control_flow(g);
    auto out = runtime::Executor(g).run({{"x", npy("early_x")}});
    EXPECT_EQ(testing::max_abs_diff(out.at("acc"), npy("early_acc")), 0);
    ASSERT_EQ(out.at("stack").shape(), (Shape{4, 4}));
    EXPECT_EQ(testing::max_abs_diff(out.at("stack"), npy("early_stack")), 0);
  }
  {
    const Graph g = load_onnx(dir + "/nested.onnx");
    no_control_flow(g);
    EXPECT_EQ(testing::max_abs_diff(runtime::Executor(g).run({{"x", npy("nested_x")}}).at("y"), npy("nested_y")), 0);
  }
  {
    const Graph g = load_onnx(dir + "/zero.onnx");
    no_control_flow(g);
    const Tensor x = Tensor::from_vector<float>({3}, {1, 2, 3});
    auto out = runtime::Executor(g).run({{"x", x}});
    EXPECT_EQ(out.at("v").to_vector<float>(), x.to_vector<float>());
    EXPECT_EQ(out.at("vs").shape(), (Shape{0, 3}));
  }
  {
    const Graph g = load_onnx(dir + "/scan.onnx");
    no_control_flow(g);
    auto out = runtime::Executor(g).run({{"s0", npy("scan_s0")}, {"a", npy("scan_a")}, {"b", npy("scan_b")}});
    for (const char* o : {"s", "ss", "ps"}) {
      const Tensor want = npy(std::string("scan_") + o);
      ASSERT_EQ(out.at(o).shape(), want.shape()) << o;
      EXPECT_LE(testing::max_abs_diff(out.at(o), want), 1e-6) << o;
    }
  }
  expect_load_error(dir + "/huge.onnx", "node 'forever' (Loop): unrolled, its at least ");
  expect_load_error(dir + "/huge.onnx", "would pass graphrun's limit of 131072 unrolled nodes per model");
}

// Sequences whose contents are known when loading become their tensors (passes::resolve_static_sequences): built by
// SequenceConstruct, SplitToSequence with split sizes, SequenceInsert at the front, SequenceErase, Identity; read by
// SequenceAt (a negative position), SequenceLength and ConcatFromSequence with and without new_axis; numpy computes
// what the ops say. A sequence that is a graph output stays refused in one line. (The scripted list a loop appends
// to: Zoo.ScriptedLoopsUnrolled*.)
TEST(OnnxIo, StaticSequencesBecomeTheirTensors) {
  const std::string dir = temp_dir("onnx_sequences");
  run_onnx_python(dir, R"(
vi = lambda name, shape, t=TensorProto.FLOAT: helper.make_tensor_value_info(name, t, shape)
i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [len(v)] if isinstance(v, list) else [], v if isinstance(v, list) else [v])
nodes = [
    helper.make_node('SplitToSequence', ['x', 'sizes'], ['parts'], axis=1),              # x[:, 0:1], x[:, 1:3], x[:, 3:6]
    helper.make_node('SequenceConstruct', ['y', 'y'], ['pair']),
    helper.make_node('SequenceInsert', ['parts', 'x', 'zero'], ['front']),                # [x, p0, p1, p2]
    helper.make_node('SequenceErase', ['front', 'one'], ['erased']),                      # [x, p1, p2]
    helper.make_node('Identity', ['erased'], ['same']),
    helper.make_node('SequenceAt', ['same', 'minus_one'], ['last']),                      # p2
    helper.make_node('SequenceLength', ['same'], ['count']),                              # 3
    helper.make_node('ConcatFromSequence', ['parts'], ['rejoined'], axis=1),              # x
    helper.make_node('ConcatFromSequence', ['pair'], ['stacked'], axis=0, new_axis=1),    # [y, y]
]
g = helper.make_graph(nodes, 'seqs', [vi('x', [2, 6]), vi('y', [3])],
                      [vi('last', [2, 3]), vi('count', [], TensorProto.INT64), vi('rejoined', [2, 6]), vi('stacked', [2, 3])],
                      [i64('sizes', [1, 2, 3]), i64('zero', 0), i64('one', 1), i64('minus_one', -1)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'seqs.onnx')
x = np.arange(12, dtype=np.float32).reshape(2, 6)
y = np.array([1.0, -1.0, 0.5], np.float32)
np.save('x.npy', x); np.save('y.npy', y)
np.save('last.npy', x[:, 3:6]); np.save('stacked.npy', np.stack([y, y]))
g2 = helper.make_graph([helper.make_node('SequenceConstruct', ['y'], ['s'])], 'out', [vi('y', [3])],
                       [helper.make_tensor_sequence_value_info('s', TensorProto.FLOAT, [3])])
onnx.save(helper.make_model(g2, opset_imports=[helper.make_opsetid('', 17)]), 'seq_output.onnx')
)");
  const Graph g = load_onnx(dir + "/seqs.onnx");
  for (const Node& n : g.nodes) EXPECT_EQ(n.op_type.find("Sequence"), std::string::npos) << n.describe();
  auto out = runtime::Executor(g).run({{"x", read_npy(dir + "/x.npy")}, {"y", read_npy(dir + "/y.npy")}});
  EXPECT_EQ(testing::max_abs_diff(out.at("last"), read_npy(dir + "/last.npy")), 0);
  EXPECT_EQ(out.at("count").to_vector<int64_t>(), std::vector<int64_t>{3});
  EXPECT_EQ(testing::max_abs_diff(out.at("rejoined"), read_npy(dir + "/x.npy")), 0);
  EXPECT_EQ(testing::max_abs_diff(out.at("stacked"), read_npy(dir + "/stacked.npy")), 0);
  expect_load_error(dir + "/seq_output.onnx", "output 's' has a sequence type");
}

// SplitToSequence without split sizes (parts of one, squeezed when keepdims is 0) or with one size for every part (the
// last part shorter; keepdims ignored, as the spec says) takes its count of parts from the input's static dimension, at
// opsets 11 and 17 (Split and Squeeze with attributes or inputs); numpy computes what the ops say. A dimension
// inference does not know keeps the sequence refused, in one line, except under graphrun run, whose inputs give it.
TEST(OnnxIo, SplitToSequenceTakesItsCountFromTheShape) {
  const std::string dir = temp_dir("onnx_split_to_sequence");
  run_onnx_python(dir, R"(
vi = lambda name, shape, t=TensorProto.FLOAT: helper.make_tensor_value_info(name, t, shape)
for opset in (11, 17):
    nodes = [
        helper.make_node('Relu', ['x'], ['r']),
        helper.make_node('SplitToSequence', ['r'], ['rows'], axis=0, keepdims=0),        # r[0], r[1], r[2]
        helper.make_node('SplitToSequence', ['r'], ['cols'], axis=-1),                   # r[:, 0:1] .. r[:, 4:5]
        helper.make_node('SplitToSequence', ['r', 'two'], ['pairs'], axis=1),            # r[:, 0:2], r[:, 2:4], r[:, 4:5]
        # keepdims 0 ignored where split is given (the spec; torch.unbind's export meant it otherwise): r[:, 0:1] ..
        helper.make_node('SplitToSequence', ['r', 'one'], ['units'], axis=1, keepdims=0),
        helper.make_node('SequenceAt', ['units', 'minus_one'], ['unit_last']),
        helper.make_node('SequenceAt', ['rows', 'one'], ['row1']),
        helper.make_node('SequenceAt', ['cols', 'minus_one'], ['col_last']),
        helper.make_node('SequenceAt', ['pairs', 'minus_one'], ['pair_last']),
        helper.make_node('SequenceLength', ['pairs'], ['pair_count']),
        helper.make_node('ConcatFromSequence', ['rows'], ['stacked'], axis=1, new_axis=1),  # r transposed
    ]
    g = helper.make_graph(nodes, 'split', [vi('x', [3, 5])],
                          [vi('row1', [5]), vi('col_last', [3, 1]), vi('pair_last', [3, 1]), vi('unit_last', [3, 1]),
                           vi('pair_count', [], TensorProto.INT64), vi('stacked', [5, 3])],
                          [helper.make_tensor('two', TensorProto.INT64, [], [2]),
                           helper.make_tensor('one', TensorProto.INT64, [], [1]),
                           helper.make_tensor('minus_one', TensorProto.INT64, [], [-1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)]), 'split%d.onnx' % opset)
x = (np.arange(15, dtype=np.float32).reshape(3, 5) - 7)
r = np.maximum(x, 0)
np.save('x.npy', x); np.save('row1.npy', r[1]); np.save('col_last.npy', r[:, 4:5]); np.save('stacked.npy', r.T)
g = helper.make_graph([helper.make_node('SplitToSequence', ['x'], ['parts'], name='unbind', keepdims=0),
                       helper.make_node('ConcatFromSequence', ['parts'], ['y'], axis=0)], 'dyn',
                      [vi('x', ['N', 5])], [vi('y', [None])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'dynamic.onnx')
)");
  for (const std::string opset : {"11", "17"}) {
    SCOPED_TRACE(opset);
    const Graph g = load_onnx(dir + "/split" + opset + ".onnx");
    for (const Node& n : g.nodes) EXPECT_EQ(n.op_type.find("Sequence"), std::string::npos) << n.describe();
    auto out = runtime::Executor(g).run({{"x", read_npy(dir + "/x.npy")}});
    EXPECT_EQ(testing::max_abs_diff(out.at("row1"), read_npy(dir + "/row1.npy")), 0);
    EXPECT_EQ(testing::max_abs_diff(out.at("col_last"), read_npy(dir + "/col_last.npy")), 0);
    EXPECT_EQ(testing::max_abs_diff(out.at("pair_last"), read_npy(dir + "/col_last.npy")), 0);
    EXPECT_EQ(testing::max_abs_diff(out.at("unit_last"), read_npy(dir + "/col_last.npy")), 0);
    EXPECT_EQ(out.at("pair_count").to_vector<int64_t>(), std::vector<int64_t>{3});
    EXPECT_EQ(testing::max_abs_diff(out.at("stacked"), read_npy(dir + "/stacked.npy")), 0);
  }
  expect_load_error(dir + "/dynamic.onnx", "node 'unbind' (SplitToSequence)");
  // graphrun run has the input: its shape gives the count (rows of x, squeezed, joined: x flattened).
  auto r = run_command(testing::graphrun_cli() + " run " + dir + "/dynamic.onnx --input x=" + dir +
                       "/x.npy --output-dir " + dir + "/out 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tensor x = read_npy(dir + "/x.npy");
  EXPECT_EQ(testing::max_abs_diff(read_npy(dir + "/out/y.npy"), x.reshaped({15})), 0) << r.output;
}

// graphrun run knows its inputs: an If on a bool input and a Loop over a count input are decided by the values
// given, for that run (the model is loaded again with them known, and says so). Without such a run the same control
// flow stays refused in one line (check, train), and an input of another type than declared is one line.
TEST(OnnxIo, RunDecidesControlFlowByItsSmallInputs) {
  const std::string dir = temp_dir("onnx_run_bound");
  run_onnx_python(dir, R"(
vi = lambda name, t, shape: helper.make_tensor_value_info(name, t, shape)
then_b = helper.make_graph([helper.make_node('Mul', ['x', 'two'], ['doubled'])], 'then', [], [vi('doubled', TensorProto.FLOAT, [3])],
                           [helper.make_tensor('two', TensorProto.FLOAT, [], [2.0])])
else_b = helper.make_graph([helper.make_node('Neg', ['x'], ['negated'])], 'else', [], [vi('negated', TensorProto.FLOAT, [3])])
body = helper.make_graph([helper.make_node('Add', ['acc_in', 'x'], ['acc_out']), helper.make_node('Identity', ['c'], ['c_out'])],
                         'body', [vi('i', TensorProto.INT64, []), vi('c', TensorProto.BOOL, []), vi('acc_in', TensorProto.FLOAT, [3])],
                         [vi('c_out', TensorProto.BOOL, []), vi('acc_out', TensorProto.FLOAT, [3])])
g = helper.make_graph([helper.make_node('If', ['flag'], ['a'], then_branch=then_b, else_branch=else_b, name='choose'),
                       helper.make_node('Loop', ['n', '', 'a'], ['y'], body=body, name='repeat')], 'ctrl',
                      [vi('flag', TensorProto.BOOL, []), vi('n', TensorProto.INT64, []), vi('x', TensorProto.FLOAT, [3])],
                      [vi('y', TensorProto.FLOAT, [3])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'ctrl.onnx')
x = np.array([1.0, -2.0, 0.5], np.float32)
np.save('x.npy', x)
for tag, flag, n in (('a', True, 3), ('b', False, 0)):
    np.save('flag_%s.npy' % tag, np.array(flag))
    np.save('n_%s.npy' % tag, np.array(n, np.int64))
    np.save('want_%s.npy' % tag, ((x * 2 if flag else -x) + n * x).astype(np.float32))
np.save('n_float.npy', np.array(3.0, np.float32))
)");
  for (const std::string tag : {"a", "b"}) {
    SCOPED_TRACE(tag);
    auto r = run_command(testing::graphrun_cli() + " run " + dir + "/ctrl.onnx --input flag=" + dir + "/flag_" + tag +
                         ".npy,n=" + dir + "/n_" + tag + ".npy,x=" + dir + "/x.npy --output-dir " + dir + "/out_" + tag + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("control flow decided by the values of 'flag', 'n' for this run"), std::string::npos)
        << r.output;
    EXPECT_EQ(testing::max_abs_diff(read_npy(dir + "/out_" + tag + "/y.npy"), read_npy(dir + "/want_" + tag + ".npy")), 0);
  }
  auto check = run_command(testing::graphrun_cli() + " check " + dir + "/ctrl.onnx 2>&1");
  EXPECT_EQ(check.exit_code, 2) << check.output;
  EXPECT_NE(check.output.find("node 'choose' (If): its condition 'flag' depends on the input data"), std::string::npos)
      << check.output;
  auto wrong = run_command(testing::graphrun_cli() + " run " + dir + "/ctrl.onnx --input flag=" + dir + "/flag_a.npy,n=" +
                           dir + "/n_float.npy,x=" + dir + "/x.npy 2>&1");
  EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("'repeat' (Loop): its trip count or its condition depends on the input data"),
            std::string::npos)
      << wrong.output;
}

// graphrun run computes the control flow its inputs decide through the model: a scripted `if x.sum() > 0` and a
// `for` over `range(int(ceil(...)))` of the data (torch 1.13 writes that trip count as the float it computes) are
// computed by running the part of the model before them on the inputs, then taken and unrolled; the outputs match
// torch for inputs that take each branch. A condition drawn at random is not computed (a second run would draw
// another): refused in one line, as is the model under `check`, which has no inputs to compute from.
TEST(OnnxIo, RunComputesTheControlFlowItsInputsDecide) {
  if (run_command(python() + " -c 'import torch' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks torch";
  const std::string dir = temp_dir("onnx_run_computed");
  run_onnx_python(dir, R"(
import torch
torch.manual_seed(0)
@torch.jit.script
def steps(x: torch.Tensor, w: torch.Tensor):
    if bool(x.sum() > 0):
        y = x @ w
    else:
        y = -(x @ w)
    for i in range(int(torch.ceil(x.abs().max() * 3))):
        y = torch.tanh(y) + 0.5
    return y
class M(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.w = torch.nn.Parameter(torch.randn(4, 3))
    def forward(s, x):
        return steps(x, s.w)
m = M()
x = torch.randn(2, 4)
torch.onnx.export(m, (x,), 'scripted.onnx', opset_version=17, input_names=['x'], output_names=['y'])
for tag, v in (('a', x), ('b', -x * 0.3)):
    np.save('x_%s.npy' % tag, v.numpy()); np.save('y_%s.npy' % tag, m(v).detach().numpy())
vi = lambda name, shape, t=TensorProto.FLOAT: helper.make_tensor_value_info(name, t, shape)
then_b = helper.make_graph([helper.make_node('Neg', ['x'], ['n'])], 'then', [], [vi('n', [3])])
else_b = helper.make_graph([helper.make_node('Identity', ['x'], ['i'])], 'else', [], [vi('i', [3])])
g = helper.make_graph([helper.make_node('RandomUniformLike', ['x'], ['u']), helper.make_node('ReduceSum', ['u'], ['s'], keepdims=0),
                       helper.make_node('Greater', ['s', 'half'], ['c']),
                       helper.make_node('If', ['c'], ['y'], then_branch=then_b, else_branch=else_b, name='coin')],
                      'coin', [vi('x', [3])], [vi('y', [3])], [helper.make_tensor('half', TensorProto.FLOAT, [], [1.5])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'coin.onnx')
np.save('x3.npy', np.ones(3, np.float32))
)");
  const std::string cli = testing::graphrun_cli();
  for (const std::string tag : {"a", "b"}) {
    SCOPED_TRACE(tag);
    const auto r = run_command(cli + " run " + dir + "/scripted.onnx --input " + dir + "/x_" + tag +
                               ".npy --output-dir " + dir + "/out_" + tag + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("control flow computed from this run's inputs"), std::string::npos) << r.output;
    EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out_" + tag + "/y.npy"), read_npy(dir + "/y_" + tag + ".npy")),
              1e-5);
  }
  auto coin = run_command(cli + " run " + dir + "/coin.onnx --input " + dir + "/x3.npy 2>&1");
  EXPECT_EQ(coin.exit_code, 2) << coin.output;
  EXPECT_NE(coin.output.find("node 'coin' (If): its condition 'c' depends on the input data"), std::string::npos)
      << coin.output;
  auto check = run_command(cli + " check " + dir + "/scripted.onnx 2>&1");
  EXPECT_EQ(check.exit_code, 2) << check.output;
  EXPECT_NE(check.output.find("depends on the input data"), std::string::npos) << check.output;
}

// graphrun run counts the Loops its inputs stop: torch.jit.script's `while` on the data (a refinement until the
// values are small, its condition an If of `a and b` in the body; a greedy decoder appending to a list, with a
// `break`) runs as many times as the data say, counted by unrolling a scratch copy 1, 2, 4, ... iterations and
// computing its conditions. Two inputs that stop after different counts match torch.
TEST(OnnxIo, RunCountsTheLoopsItsInputsStop) {
  if (run_command(python() + " -c 'import torch' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks torch";
  const std::string dir = temp_dir("onnx_run_while");
  run_onnx_python(dir, R"(
import torch
from typing import List
@torch.jit.script
def refine(x: torch.Tensor, w: torch.Tensor):
    y = x
    i = 0
    while bool(y.abs().max() > 0.05) and i < 40:
        y = torch.tanh(y @ w) * 0.7
        i += 1
    return y
@torch.jit.script
def decode(h: torch.Tensor, e: torch.Tensor, out: torch.Tensor):
    toks: List[torch.Tensor] = []
    t = torch.zeros(h.size(0), dtype=torch.long)
    steps = 0
    while steps < 12:
        h = torch.tanh(h @ out + e[t])
        t = h.argmax(1)
        toks.append(t)
        steps += 1
        if bool((t == 0).all()):
            break
    return torch.stack(toks, 1)
class M(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.w = torch.nn.Parameter(torch.randn(4, 4) * 0.6)
        s.e = torch.nn.Parameter(torch.randn(4, 4))
        s.o = torch.nn.Parameter(torch.randn(4, 4))
    def forward(s, x):
        return refine(x, s.w), decode(x, s.e, s.o)
torch.manual_seed(0)
m = M()
with torch.no_grad():
    m.e[0] = -3.0; m.e[0, 0] = 3.0  # token 0 leads to token 0: a decoder that reaches it stops
x = torch.randn(2, 4)
torch.onnx.export(m, (x,), 'while.onnx', opset_version=17, input_names=['x'], output_names=['y', 'tokens'])
for tag, v in (('a', x), ('b', x * 0.01), ('c', torch.tensor([[5.0, -1, -1, -1], [5.0, -1, -1, -1]]))):
    y, t = m(v)
    np.save('x_%s.npy' % tag, v.numpy()); np.save('y_%s.npy' % tag, y.detach().numpy()); np.save('t_%s.npy' % tag, t.numpy())
)");
  const std::string cli = testing::graphrun_cli();
  std::set<std::string> counts;
  for (const std::string tag : {"a", "b", "c"}) {
    SCOPED_TRACE(tag);
    const auto r = run_command(cli + " run " + dir + "/while.onnx --input " + dir + "/x_" + tag + ".npy --output-dir " +
                               dir + "/out_" + tag + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("(Loop) computed from this run's inputs: ");
    ASSERT_NE(at, std::string::npos) << r.output;
    counts.insert(r.output.substr(at, r.output.find('\n', at) - at));
    EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out_" + tag + "/y.npy"), read_npy(dir + "/y_" + tag + ".npy")),
              1e-5);
    const Tensor tokens = read_npy(dir + "/out_" + tag + "/tokens.npy"), want = read_npy(dir + "/t_" + tag + ".npy");
    EXPECT_EQ(tokens.shape(), want.shape());
    EXPECT_EQ(tokens.as_int64s(), want.as_int64s());
  }
  EXPECT_GT(counts.size(), 1u) << "the inputs should stop the refinement after different counts";
}

// graphrun run takes sequence and optional inputs and outputs (onnx's SequenceProto and OptionalProto .pb files; a
// .npy for an optional tensor; an optional input left out holds no value): the model loads for the lists given, its
// sequence and optional ops become the tensors they hold (SequenceMap one body copy per element), and a sequence or
// optional output is printed element by element and written whole as a .pb. Against numpy doing what the ops say.
TEST(OnnxIo, RunTakesSequenceAndOptionalInputsAndOutputs) {
  const std::string dir = temp_dir("onnx_run_sequences");
  run_onnx_python(dir, R"(
from onnx import numpy_helper
vi = lambda name, shape, t=TensorProto.FLOAT: helper.make_tensor_value_info(name, t, shape)
seq = lambda name: helper.make_tensor_sequence_value_info(name, TensorProto.FLOAT, [2])
opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
body = helper.make_graph([helper.make_node('Mul', ['x', 'scale'], ['scaled']), helper.make_node('Relu', ['scaled'], ['y']),
                          helper.make_node('ReduceSum', ['x'], ['s'], keepdims=0)],
                         'body', [vi('x', [2]), vi('scale', [2])], [vi('y', [2]), vi('s', [])])
then_b = helper.make_graph([helper.make_node('OptionalGetElement', ['maybe'], ['got']), helper.make_node('Add', ['got', 'one'], ['m_then'])],
                           'then', [], [vi('m_then', [2])])
else_b = helper.make_graph([helper.make_node('Identity', ['zeros'], ['m_else'])], 'else', [], [vi('m_else', [2])])
nodes = [
    helper.make_node('SequenceMap', ['xs', 'scale'], ['mapped', 'sums'], body=body),
    helper.make_node('ConcatFromSequence', ['mapped'], ['total'], axis=0, new_axis=1),
    helper.make_node('SequenceLength', ['xs'], ['count']),
    helper.make_node('OptionalHasElement', ['maybe'], ['has']),
    helper.make_node('If', ['has'], ['m'], then_branch=then_b, else_branch=else_b, name='given'),
    helper.make_node('SequenceInsert', ['sums', 'm'], ['back']),
    helper.make_node('Optional', ['m'], ['opt_out']),
]
g = helper.make_graph(nodes, 'seqs', [seq('xs'), helper.make_value_info('maybe', opt_t), vi('scale', [2])],
                      [vi('total', ['n', 2]), vi('count', [], TensorProto.INT64), helper.make_tensor_sequence_value_info('back', TensorProto.FLOAT, None),
                       helper.make_value_info('opt_out', opt_t)],
                      [helper.make_tensor('one', TensorProto.FLOAT, [], [1.0]), helper.make_tensor('zeros', TensorProto.FLOAT, [2], [0.0, 0.0])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'seqs.onnx')
rng = np.random.default_rng(3)
scale = np.array([2.0, -0.5], np.float32)
np.save('scale.npy', scale)
for tag, n, maybe in (('a', 3, np.array([0.25, -4.0], np.float32)), ('b', 1, None)):
    xs = [rng.standard_normal(2).astype(np.float32) for _ in range(n)]
    open('xs_%s.pb' % tag, 'wb').write(numpy_helper.from_list(xs, 'xs').SerializeToString())
    for k, x in enumerate(xs): np.save('x_%s_%d.npy' % (tag, k), x)
    if maybe is not None: np.save('maybe_%s.npy' % tag, maybe)
    np.save('total_%s.npy' % tag, np.stack([np.maximum(x * scale, 0) for x in xs]))
    m = maybe + 1 if maybe is not None else np.zeros(2, np.float32)
    np.save('m_%s.npy' % tag, m)
    for k, x in enumerate(xs): np.save('sum_%s_%d.npy' % (tag, k), np.array(x.sum(), np.float32))
np.save('count_i64.npy', np.zeros(2, np.int64))
open('xs_long.pb', 'wb').write(numpy_helper.from_list([np.zeros(2, np.float32)] * 2, 'xs').SerializeToString())
two = helper.make_graph([helper.make_node('SequenceMap', ['p', 'q'], ['r'], body=helper.make_graph(
                             [helper.make_node('Add', ['a', 'b'], ['c'])], 'add', [vi('a', [2]), vi('b', [2])], [vi('c', [2])]))],
                        'two', [seq('p'), seq('q')], [helper.make_tensor_sequence_value_info('r', TensorProto.FLOAT, [2])])
onnx.save(helper.make_model(two, opset_imports=[helper.make_opsetid('', 17)]), 'two.onnx')
open('p.pb', 'wb').write(numpy_helper.from_list([np.ones(2, np.float32)] * 3, 'p').SerializeToString())
open('q.pb', 'wb').write(numpy_helper.from_list([np.ones(2, np.float32)] * 2, 'q').SerializeToString())
)");
  const std::string cli = testing::graphrun_cli();
  for (const std::string tag : {"a", "b"}) {
    SCOPED_TRACE(tag);
    const bool given = tag == "a";
    const auto r = run_command(
        cli + " run " + dir + "/seqs.onnx --input xs=" + dir + "/xs_" + tag + ".pb,scale=" + dir + "/scale.npy" +
        (given ? ",maybe=" + dir + "/maybe_a.npy" : std::string()) + " --output-dir " + dir + "/out_" + tag + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const size_t n = given ? 3 : 1;
    EXPECT_NE(r.output.find("back: sequence of " + std::to_string(n + 1) + " tensors"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("  back[0]: f32"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("opt_out: optional holding a tensor"), std::string::npos) << r.output;
    const std::string out = dir + "/out_" + tag;
    EXPECT_LT(testing::max_abs_diff(read_npy(out + "/total.npy"), read_npy(dir + "/total_" + tag + ".npy")), 1e-6);
    EXPECT_EQ(read_npy(out + "/count.npy").to_vector<int64_t>(), std::vector<int64_t>{static_cast<int64_t>(n)});
    const CompositeValue back = read_composite_pb(out + "/back.pb", false, "back");
    ASSERT_EQ(back.tensors.size(), n + 1);
    for (size_t k = 0; k < n; ++k)
      EXPECT_LT(
          testing::max_abs_diff(back.tensors[k], read_npy(dir + "/sum_" + tag + "_" + std::to_string(k) + ".npy")),
          1e-6);
    EXPECT_EQ(testing::max_abs_diff(back.tensors[n], read_npy(dir + "/m_" + tag + ".npy")), 0);
    const CompositeValue opt = read_composite_pb(out + "/opt_out.pb", true, "opt_out");
    ASSERT_TRUE(opt.optional && !opt.none && !opt.sequence && opt.tensors.size() == 1);
    EXPECT_EQ(testing::max_abs_diff(opt.tensors[0], read_npy(dir + "/m_" + tag + ".npy")), 0);
  }
  // Sequences of different lengths in one SequenceMap, a sequence given as a tensor file: one line each, exit 2.
  auto bad = run_command(cli + " run " + dir + "/two.onnx --input p=" + dir + "/p.pb,q=" + dir + "/q.pb 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("its sequences 'p' and 'q' hold 3 and 2 tensors"), std::string::npos) << bad.output;
  // A sequence given as its tensors, one --input each, in order: as the SequenceProto of the same tensors.
  std::string each;
  for (int k = 0; k < 3; ++k) each += " --input xs=" + dir + "/x_a_" + std::to_string(k) + ".npy";
  auto listed =
      run_command(cli + " run " + dir + "/seqs.onnx" + each + " --input scale=" + dir +
                  "/scale.npy --input maybe=" + dir + "/maybe_a.npy --output-dir " + dir + "/out_listed 2>&1");
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out_listed/total.npy"), read_npy(dir + "/total_a.npy")), 1e-6);
  // One tensor file is a sequence of one; a tensor of another type than the elements is one line.
  listed = run_command(cli + " run " + dir + "/seqs.onnx --input xs=" + dir + "/x_a_1.npy --input scale=" + dir +
                       "/scale.npy --output-dir " + dir + "/out_one 2>&1");
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_EQ(read_npy(dir + "/out_one/count.npy").to_vector<int64_t>(), std::vector<int64_t>{1});
  bad = run_command(cli + " run " + dir + "/seqs.onnx --input xs=" + dir + "/x_a_0.npy --input xs=" + dir +
                    "/count_i64.npy --input scale=" + dir + "/scale.npy 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("input 'xs[1]' from " + dir + "/count_i64.npy is i64[2], but the model expects f32[2]"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
  // Without a run's values, the model stays refused in one line (check, train).
  auto check = run_command(cli + " check " + dir + "/seqs.onnx 2>&1");
  EXPECT_EQ(check.exit_code, 2) << check.output;
  EXPECT_NE(check.output.find("node '#0' (SequenceMap): optional/sequence types are not supported"), std::string::npos)
      << check.output;
}

// A whole torchvision detector, exported as users export it (fasterrcnn_mobilenet_v3_large_320_fpn, random weights,
// opset 11): its Ifs on the number of boxes are computed from the image (graphrun run's computed control flow), and its
// detections match torchvision's: every box, label and score of one found in the other (tolerances for the float
// sums; detections whose scores tie may come in another order).
TEST(OnnxIo, TorchvisionFasterRcnnRunsAsTorchvisionDetects) {
  if (run_command(python() + " -c 'import torchvision' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks torchvision";
  const std::string dir = temp_dir("onnx_faster_rcnn");
  run_onnx_python(dir, R"(
import torch, torchvision, warnings
warnings.filterwarnings('ignore')
torch.manual_seed(0)
m = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=5,
                                                                       box_score_thresh=0.0)
m.eval()
x = [torch.rand(3, 320, 320)]
with torch.no_grad():
    out = m(x)[0]
torch.onnx.export(m, (x,), 'frcnn.onnx', opset_version=11, input_names=['image'], output_names=['boxes', 'labels', 'scores'])
np.save('image.npy', x[0].numpy())
for k in ('boxes', 'labels', 'scores'): np.save('want_%s.npy' % k, out[k].numpy())
from PIL import Image
Image.fromarray((x[0].permute(1, 2, 0).numpy() * 255).astype(np.uint8)).save('photo.png')
)");
  // A photo as its input: the image is read before the control flow is computed from it.
  const auto photo =
      run_command(testing::graphrun_cli() + " run " + dir + "/frcnn.onnx --input " + dir + "/photo.png 2>&1");
  EXPECT_EQ(photo.exit_code, 0) << photo.output;
  EXPECT_NE(photo.output.find("scores: f32["), std::string::npos) << photo.output;
  const auto r = run_command(testing::graphrun_cli() + " run " + dir + "/frcnn.onnx --input image=" + dir +
                             "/image.npy --output-dir " + dir + "/out 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("control flow computed from this run's inputs"), std::string::npos) << r.output;
  const Tensor boxes = read_npy(dir + "/out/boxes.npy"), labels = read_npy(dir + "/out/labels.npy"),
               scores = read_npy(dir + "/out/scores.npy");
  const Tensor want_boxes = read_npy(dir + "/want_boxes.npy"), want_labels = read_npy(dir + "/want_labels.npy"),
               want_scores = read_npy(dir + "/want_scores.npy");
  ASSERT_EQ(scores.shape(), want_scores.shape());
  ASSERT_GT(scores.numel(), 10);
  const std::vector<double> b = boxes.as_doubles(), wb = want_boxes.as_doubles(), s = scores.as_doubles(),
                            ws = want_scores.as_doubles();
  const std::vector<int64_t> l = labels.as_int64s(), wl = want_labels.as_int64s();
  std::vector<bool> used(ws.size());
  int unmatched = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    bool found = false;
    for (size_t j = 0; j < ws.size() && !found; ++j) {
      if (used[j] || l[i] != wl[j] || std::fabs(s[i] - ws[j]) > 1e-4) continue;
      double d = 0;
      for (int k = 0; k < 4; ++k) d = std::max(d, std::fabs(b[4 * i + k] - wb[4 * j + k]));
      found = used[j] = d < 0.05;
    }
    unmatched += !found;
  }
  EXPECT_EQ(unmatched, 0) << "of " << s.size() << " detections";
}

// torchvision.ops.nms exports NonMaxSuppression asking for INT64_MAX boxes per class; graphrun keeps what
// torchvision keeps, in its order (overlapping random boxes, IoU 0.4; batched_nms's class offsets too).
TEST(OnnxIo, TorchvisionNmsKeepsWhatTorchvisionKeeps) {
  if (run_command(python() + " -c 'import torchvision' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks torchvision";
  const std::string dir = temp_dir("onnx_nms");
  run_onnx_python(dir, R"(
import torch, torchvision
class Nms(torch.nn.Module):
    def forward(s, boxes, scores, classes):
        return torchvision.ops.nms(boxes, scores, 0.4), torchvision.ops.batched_nms(boxes, scores, classes, 0.5)
r = np.random.default_rng(0)
xy = r.random((40, 2)).astype(np.float32)
b = np.concatenate([xy, xy + r.random((40, 2)).astype(np.float32) * 0.4], 1)
sc = r.random(40).astype(np.float32)
cl = r.integers(0, 3, 40)
args = (torch.from_numpy(b), torch.from_numpy(sc), torch.from_numpy(cl))
torch.onnx.export(Nms(), args, 'nms.onnx', opset_version=11, input_names=['boxes', 'scores', 'classes'],
                  output_names=['keep', 'keep_batched'])
keep, batched = Nms()(*args)
np.save('boxes.npy', b); np.save('scores.npy', sc); np.save('classes.npy', cl)
np.save('keep.npy', keep.numpy()); np.save('keep_batched.npy', batched.numpy())
)");
  const Graph g = load_onnx(dir + "/nms.onnx");
  auto out = runtime::Executor(g).run({{"boxes", read_npy(dir + "/boxes.npy")},
                                       {"scores", read_npy(dir + "/scores.npy")},
                                       {"classes", read_npy(dir + "/classes.npy")}});
  for (const char* k : {"keep", "keep_batched"}) {
    const Tensor want = read_npy(dir + "/" + k + ".npy");
    ASSERT_EQ(out.at(k).shape(), want.shape()) << k;
    EXPECT_EQ(out.at(k).as_int64s(), want.as_int64s()) << k;
    EXPECT_GT(want.numel(), 5) << k;
  }
}

// RoiAlign in mode max, against numpy computing what ONNX Runtime computes (the spec says only "max pooling"): per
// sampling point the largest of its four weighted bilinear taps, per bin the largest over its points; points
// outside the image count 0. Both coordinate modes, a fixed and an adaptive grid, regions partly outside.
TEST(OnnxIo, RoiAlignMaxModeTakesTheLargestWeightedTap) {
  const std::string dir = temp_dir("onnx_roi_align_max");
  run_onnx_python(dir, R"(
import math
rng = np.random.default_rng(5)
x = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
rois = np.array([[0, 0, 6, 8], [-2, 1, 5.5, 4], [3, 3, 3.5, 3.2], [1, -1, 12, 11]], np.float32)
batch = np.array([0, 1, 1, 0], np.int64)
def roi_align_max(x, rois, batch, oh, ow, ratio, scale, half):
    N, C, H, W = x.shape
    y = np.zeros((len(rois), C, oh, ow), np.float64)
    off = 0.5 if half else 0.0
    for r, (bx) in enumerate(rois.astype(np.float64)):
        x1, y1, x2, y2 = bx * scale - off
        w, h = x2 - x1, y2 - y1
        if not half: w, h = max(w, 1.0), max(h, 1.0)
        bh, bw = h / oh, w / ow
        gh = ratio if ratio > 0 else int(math.ceil(h / oh))
        gw = ratio if ratio > 0 else int(math.ceil(w / ow))
        for c in range(C):
            plane = x[batch[r], c].astype(np.float64)
            for ph in range(oh):
                for pw in range(ow):
                    best = None
                    for iy in range(gh):
                        for ix in range(gw):
                            yy = y1 + ph * bh + (iy + 0.5) * bh / gh
                            xx = x1 + pw * bw + (ix + 0.5) * bw / gw
                            if yy < -1 or yy > H or xx < -1 or xx > W:
                                v = 0.0
                            else:
                                yy, xx = max(yy, 0.0), max(xx, 0.0)
                                y0, x0 = int(yy), int(xx)
                                if y0 >= H - 1: y0 = y1_ = H - 1; yy = float(y0)
                                else: y1_ = y0 + 1
                                if x0 >= W - 1: x0 = x1_ = W - 1; xx = float(x0)
                                else: x1_ = x0 + 1
                                ly, lx = yy - y0, xx - x0
                                hy, hx = 1 - ly, 1 - lx
                                v = max(hy * hx * plane[y0, x0], hy * lx * plane[y0, x1_], ly * hx * plane[y1_, x0], ly * lx * plane[y1_, x1_])
                            best = v if best is None else max(best, v)
                    y[r, c, ph, pw] = 0.0 if best is None else best
    return y.astype(np.float32)
cases = [('half_pixel', 2), ('output_half_pixel', 0), ('half_pixel', 0)]
for k, (ct, ratio) in enumerate(cases):
    node = helper.make_node('RoiAlign', ['x', 'rois', 'batch'], ['y'], mode='max', output_height=3, output_width=2,
                            sampling_ratio=ratio, spatial_scale=0.8, coordinate_transformation_mode=ct)
    g = helper.make_graph([node], 'ra', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3, 9, 7]),
                                         helper.make_tensor_value_info('rois', TensorProto.FLOAT, [4, 4]),
                                         helper.make_tensor_value_info('batch', TensorProto.INT64, [4])],
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, [4, 3, 3, 2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 16)]), 'max_%d.onnx' % k)
    np.save('want_%d.npy' % k, roi_align_max(x, rois, batch, 3, 2, ratio, 0.8, ct == 'half_pixel'))
np.save('x.npy', x); np.save('rois.npy', rois); np.save('batch.npy', batch)
)");
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE(k);
    auto out = runtime::Executor(load_onnx(dir + "/max_" + std::to_string(k) + ".onnx"))
                   .run({{"x", read_npy(dir + "/x.npy")},
                         {"rois", read_npy(dir + "/rois.npy")},
                         {"batch", read_npy(dir + "/batch.npy")}});
    EXPECT_LT(testing::max_abs_diff(out.at("y"), read_npy(dir + "/want_" + std::to_string(k) + ".npy")), 1e-6);
  }
}

// torchvision.ops.roi_align exports RoiAlign without saying how its boxes align (its symbolic ignores
// `aligned`), so the file means what its opset's default says: half_pixel at opset 16 (torchvision's
// aligned=True), output_half_pixel before (aligned=False). graphrun gives torchvision's answer there, with a
// sampling grid of 2 and the adaptive one (sampling_ratio -1, exported as 0), boxes partly outside the image.
TEST(OnnxIo, TorchvisionRoiAlignGivesTorchvisionsAnswerAsItsOpsetMeans) {
  if (run_command(python() + " -c 'import torchvision' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks torchvision";
  const std::string dir = temp_dir("onnx_roi_align");
  run_onnx_python(dir, R"(
import torch, torchvision
class Roi(torch.nn.Module):
    def __init__(s, aligned):
        super().__init__()
        s.aligned = aligned
    def forward(s, x, boxes):
        return (torchvision.ops.roi_align(x, boxes, (3, 4), spatial_scale=0.5, sampling_ratio=2, aligned=s.aligned),
                torchvision.ops.roi_align(x, boxes, (2, 2), spatial_scale=0.25, sampling_ratio=-1, aligned=s.aligned))
r = np.random.default_rng(0)
x = r.standard_normal((2, 3, 16, 12)).astype(np.float32)
b = np.concatenate([r.integers(0, 2, (6, 1)).astype(np.float32), r.random((6, 2)).astype(np.float32) * 20 - 2,
                    r.random((6, 2)).astype(np.float32) * 20 + 5], 1)
np.save('x.npy', x); np.save('boxes.npy', b)
for aligned, opset in ((True, 16), (False, 11)):
    m = Roi(aligned)
    torch.onnx.export(m, (torch.from_numpy(x), torch.from_numpy(b)), f'roi{opset}.onnx', opset_version=opset,
                      input_names=['x', 'boxes'], output_names=['fixed', 'adaptive'])
    for name, y in zip(('fixed', 'adaptive'), m(torch.from_numpy(x), torch.from_numpy(b))):
        np.save(f'{name}{opset}.npy', y.numpy())
)");
  for (const char* opset : {"16", "11"}) {
    SCOPED_TRACE(std::string("opset ") + opset);
    const Graph g = load_onnx(dir + "/roi" + opset + ".onnx");
    auto out = runtime::Executor(g).run({{"x", read_npy(dir + "/x.npy")}, {"boxes", read_npy(dir + "/boxes.npy")}});
    for (const char* k : {"fixed", "adaptive"})
      EXPECT_LE(testing::max_abs_diff(out.at(k), read_npy(dir + "/" + std::string(k) + opset + ".npy")), 1e-5) << k;
  }
}

// An If whose condition the shapes decide becomes the branch it takes (torch exports x.squeeze(1) of a dimension it
// could not size as If(Shape(x)[1] == 1, Squeeze, Identity)); one that depends on the data is refused in one line.
TEST(OnnxIo, IfsTheShapesDecideBecomeTheirBranch) {
  const std::string dir = temp_dir("onnx_io_static_if");
  run_onnx_python(dir, R"(
def squeeze_model(dims, name, collide=False, nested=False, data_cond=False, min_max=False):
    X = helper.make_tensor_value_info('x', TensorProto.FLOAT, dims)
    Y = helper.make_tensor_value_info('y', TensorProto.FLOAT, ['a', 'b', 'c'][:3 if dims[1] != 1 else 2])
    one = helper.make_tensor('one', TensorProto.INT64, [], [1])
    axes = helper.make_tensor('axes', TensorProto.INT64, [1], [1])
    # A branch's own value may have the name of one outside ('t', the Relu's): it is renamed, not merged.
    inner = 't' if collide else 'sq'
    then_nodes = [helper.make_node('Squeeze', ['x', 'axes'], [inner], name='sq')]
    then_inits = [axes]
    if nested:  # a second If inside, on a constant: taken as well
        yes = helper.make_node('Constant', [], ['yes'], value=helper.make_tensor('v', TensorProto.BOOL, [], [True]))
        neg = helper.make_graph([helper.make_node('Neg', [inner], ['n'])], 'neg', [],
                                [helper.make_tensor_value_info('n', TensorProto.FLOAT, None)])
        pos = helper.make_graph([helper.make_node('Identity', [inner], ['p'])], 'pos', [],
                                [helper.make_tensor_value_info('p', TensorProto.FLOAT, None)])
        then_nodes += [yes, helper.make_node('If', ['yes'], ['inner_out'], name='inner_if', then_branch=neg,
                                             else_branch=pos)]
        inner = 'inner_out'
    then_g = helper.make_graph(then_nodes, 'then', [], [helper.make_tensor_value_info(inner, TensorProto.FLOAT, None)],
                               initializer=then_inits)
    else_g = helper.make_graph([helper.make_node('Identity', ['x'], ['same'])], 'else', [],
                               [helper.make_tensor_value_info('same', TensorProto.FLOAT, None)])
    if data_cond:
        nodes = [helper.make_node('ReduceSum', ['x'], ['s'], keepdims=0),
                 helper.make_node('Constant', [], ['zero'], value=helper.make_tensor('z', TensorProto.FLOAT, [], [0.0])),
                 helper.make_node('Greater', ['s', 'zero'], ['cond'])]
    elif min_max:  # as torch.diagonal tests its length: Not(Max(Min(d0 - 1, d1 - 1), 0) == 0), d1 == 1 here
        zero = helper.make_node('Constant', [], ['zero'], value=helper.make_tensor('z', TensorProto.INT64, [], [0]))
        nodes = [zero, helper.make_node('Shape', ['x'], ['shape']),
                 helper.make_node('Gather', ['shape', 'zero'], ['d0'], axis=0),
                 helper.make_node('Gather', ['shape', 'one'], ['d1'], axis=0),
                 helper.make_node('Sub', ['d0', 'one'], ['d0m']), helper.make_node('Sub', ['d1', 'one'], ['d1m']),
                 helper.make_node('Min', ['d0m', 'd1m'], ['lo']), helper.make_node('Max', ['lo', 'zero'], ['len']),
                 helper.make_node('Equal', ['len', 'zero'], ['empty']), helper.make_node('Not', ['empty'], ['not_empty']),
                 helper.make_node('Not', ['not_empty'], ['cond'])]
    else:
        nodes = [helper.make_node('Shape', ['x'], ['shape']),
                 helper.make_node('Gather', ['shape', 'one'], ['d1'], axis=0),
                 helper.make_node('Equal', ['d1', 'one'], ['cond'])]
    nodes += [helper.make_node('Relu', ['x'], ['t']),
              helper.make_node('If', ['cond'], ['picked'], name='squeeze_if', then_branch=then_g, else_branch=else_g),
              helper.make_node('Add', ['picked', 'picked'], ['y'])]
    m = helper.make_model(helper.make_graph(nodes, 'g', [X], [Y, helper.make_tensor_value_info('t', TensorProto.FLOAT, dims)],
                                            initializer=[one]), opset_imports=[helper.make_opsetid('', 17)])
    onnx.save(m, name)
squeeze_model([2, 1, 3], 'squeeze.onnx')
squeeze_model(['N', 1, 3], 'squeeze_symbolic.onnx')
squeeze_model([2, 4, 3], 'keep.onnx')
squeeze_model([2, 1, 3], 'collide.onnx', collide=True)
squeeze_model([2, 1, 3], 'nested.onnx', nested=True)
squeeze_model([2, 1, 3], 'data.onnx', data_cond=True)
squeeze_model([2, 1, 3], 'min_max.onnx', min_max=True)
)");
  auto ops_of = [](const Graph& g) {
    std::vector<std::string> ops;
    for (const Node& n : g.nodes) ops.push_back(n.op_type);
    return ops;
  };
  auto run = [](const Graph& g, const Tensor& x) { return runtime::Executor(g).run({{"x", x}}); };
  std::vector<float> v(6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 2.5f;
  const Tensor x = Tensor::from_vector<float>({2, 1, 3}, v);
  for (const char* name : {"squeeze.onnx", "squeeze_symbolic.onnx", "collide.onnx", "min_max.onnx"}) {
    SCOPED_TRACE(name);
    const Graph g = load_onnx(dir + "/" + name);
    for (const std::string& op : ops_of(g)) EXPECT_NE(op, "If");
    auto out = run(g, x);
    EXPECT_EQ(shape_str(out.at("y").shape()), "[2,3]");
    EXPECT_EQ(out.at("y").to_vector<float>(), (std::vector<float>{-5, -3, -1, 1, 3, 5}));
    EXPECT_EQ(out.at("t").to_vector<float>(), (std::vector<float>{0, 0, 0, 0.5f, 1.5f, 2.5f}));  // not the branch's
  }
  {  // Shape(x)[1] is 4: the else branch, x unchanged
    const Graph g = load_onnx(dir + "/keep.onnx");
    for (const std::string& op : ops_of(g)) EXPECT_NE(op, "If");
    const Tensor x4 = Tensor::from_vector<float>({2, 4, 3}, std::vector<float>(24, 1.f));
    EXPECT_EQ(shape_str(run(g, x4).at("y").shape()), "[2,4,3]");
  }
  {  // the If inside the taken branch is taken too: y = 2 * -squeeze(x)
    const Graph g = load_onnx(dir + "/nested.onnx");
    for (const std::string& op : ops_of(g)) EXPECT_NE(op, "If");
    EXPECT_EQ(run(g, x).at("y").to_vector<float>(), (std::vector<float>{5, 3, 1, -1, -3, -5}));
  }
  expect_load_error(dir + "/data.onnx", "node 'squeeze_if' (If): its condition 'cond' depends on the input data");
}

TEST(OnnxIo, BadFilesGiveOneClearLine) {
  std::string dir = temp_dir("onnx_io_bad");
  run_onnx_python(dir, std::string(kTinyModel) + R"(
data = open('tiny.onnx', 'rb').read()
open('truncated.onnx', 'wb').write(data[:len(data) * 2 // 3])
open('cut_end.onnx', 'wb').write(data[:-3])
rng = np.random.default_rng(0)
open('random.onnx', 'wb').write(rng.integers(0, 256, 5000, dtype=np.uint8).tobytes())
corrupt = bytearray(data); corrupt[4:44] = b'\xff' * 40
open('corrupt.onnx', 'wb').write(bytes(corrupt))
open('text.onnx', 'w').write('this is not a model, just some text\n' * 10)
open('empty.onnx', 'wb').write(b'')
m29 = onnx.load('tiny.onnx'); m29.opset_import[0].version = 29; onnx.save(m29, 'opset29.onnx')
m0 = onnx.load('tiny.onnx'); m0.opset_import[0].version = 0; onnx.save(m0, 'opset0.onnx')
X = helper.make_tensor_value_info('c', TensorProto.BOOL, [])
Y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [1])
one = helper.make_graph([helper.make_node('Constant', [], ['o1'], value_floats=[1.0])], 'then', [],
                        [helper.make_tensor_value_info('o1', TensorProto.FLOAT, [1])])
two = helper.make_graph([helper.make_node('Constant', [], ['o2'], value_floats=[2.0])], 'else', [],
                        [helper.make_tensor_value_info('o2', TensorProto.FLOAT, [1])])
n = helper.make_node('If', ['c'], ['y'], name='branch', then_branch=one, else_branch=two)
onnx.save(helper.make_model(helper.make_graph([n], 'g', [X], [Y]), opset_imports=[helper.make_opsetid('', 13)]), 'if.onnx')
bad = onnx.load('tiny.onnx'); bad.graph.node[1].input[0] = 'nowhere'; onnx.save(bad, 'dangling.onnx')
unsorted = onnx.load('tiny.onnx'); unsorted.graph.node.reverse(); onnx.save(unsorted, 'unsorted.onnx')
cyc = onnx.load('tiny.onnx'); cyc.graph.node[0].input[0] = 'relu1'; onnx.save(cyc, 'cycle.onnx')
)");
  expect_load_error(dir + "/missing.onnx", "no such file");
  expect_load_error(dir, "directory");
  expect_load_error(dir + "/empty.onnx", "empty file");
  expect_load_error(dir + "/truncated.onnx", "not");
  expect_load_error(dir + "/cut_end.onnx", "");
  expect_load_error(dir + "/random.onnx", "");
  expect_load_error(dir + "/corrupt.onnx", "");
  expect_load_error(dir + "/text.onnx", "not");
  expect_load_error(dir + "/opset29.onnx", "opset 29 is not supported");
  expect_load_error(dir + "/opset0.onnx", "opset 0 is not supported");
  expect_load_error(dir + "/if.onnx", "node 'branch' (If): its condition 'c' depends on the input data");
  expect_load_error(dir + "/dangling.onnx", "node 'relu1' (Relu): input 'nowhere' is not produced");
  expect_load_error(dir + "/cycle.onnx", "cycle");
  // Nodes out of order are merely sorted.
  Graph g = load_onnx(dir + "/unsorted.onnx");
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].op_type, "Conv");
  EXPECT_EQ(g.nodes[2].op_type, "Flatten");
}

// Opsets below 7 are converted on load by onnx's version converter, with one line on stderr: Add-6's
// explicit broadcast (broadcast=1) becomes opset 7's numpy broadcasting with the same numbers, and
// opset-6 BatchNormalization drops is_test/spatial; the converted model runs like the original.
TEST(OnnxIo, OldOpsetsAreConvertedOnLoad) {
  std::string dir = temp_dir("onnx_io_old_opset");
  run_onnx_python(dir, R"(
X = helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3, 2, 2])
Y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3, 2, 2])
inits = [numpy_helper.from_array(np.array([1, -2, 3], np.float32), n) for n in ('s', 'bias', 'mean')]
inits.append(numpy_helper.from_array(np.array([1, 4, 0.25], np.float32), 'var'))
inits.append(numpy_helper.from_array(np.array([0.5, -1], np.float32), 'b'))
nodes = [helper.make_node('Add', ['x', 'b'], ['a'], broadcast=1),
         helper.make_node('BatchNormalization', ['a', 's', 'bias', 'mean', 'var'], ['y'], is_test=1, epsilon=0.0)]
m = helper.make_model(helper.make_graph(nodes, 'g', [X], [Y], inits), opset_imports=[helper.make_opsetid('', 6)])
onnx.save(m, 'old.onnx')
x = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
c = lambda v: np.array(v, np.float32).reshape(1, 3, 1, 1)
a = x + np.array([0.5, -1], np.float32)
np.save('x.npy', x)
np.save('want.npy', c([1, -2, 3]) * (a - c([1, -2, 3])) / np.sqrt(c([1, 4, 0.25])) + c([1, -2, 3]))
)");
  Graph g = load_onnx(dir + "/old.onnx");
  EXPECT_EQ(g.opset(""), 7);
  for (const Node& n : g.nodes) {
    EXPECT_FALSE(n.attr("broadcast")) << n.describe();
    EXPECT_FALSE(n.attr("is_test")) << n.describe();
  }
  auto r = run_command("cd '" + dir + "' && '" + testing::graphrun_cli() +
                       "' run old.onnx --input x.npy --output-dir out 2>err.txt && " + python() +
                       " -c \"import numpy as np; d = np.abs(np.load('out/y.npy') - np.load('want.npy')).max(); "
                       "print('maxdiff', d); assert d < 1e-5\" && cat err.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("old.onnx: opset 6 converted to opset 7 on load (onnx's version converter)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("converted"), r.output.rfind("converted")) << "said more than once: " << r.output;
}


// torch names every exported graph "torch_jit": the model takes its file's name, for the messages.
TEST(OnnxIo, AnExportersDefaultGraphNameGivesWayToTheFileName) {
  std::string dir = temp_dir("onnx_io_graph_name");
  run_onnx_python(dir, R"(
for name, f in (('torch_jit', 'mynet.onnx'), ('encoder', 'other.onnx')):
    g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], name, [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), f)
)");
  EXPECT_EQ(load_onnx(dir + "/mynet.onnx").name, "mynet");
  EXPECT_EQ(load_onnx(dir + "/other.onnx").name, "encoder");
}

// save_onnx wrote none of what a model says of itself (metadata_props, doc_string, model_version, domain,
// producer_version, the inputs' and outputs' doc_strings), and the graph's name the file's stem had taken
// for messages: train --save lost them all. They come through the IR and the training pipeline unchanged.
TEST(OnnxIo, SaveKeepsTheModelsMetadataAndItsGraphsName) {
  std::string dir = temp_dir("onnx_io_metadata");
  run_onnx_python(dir, R"(
X = helper.make_tensor_value_info('image', TensorProto.FLOAT, ['batch', 4])
X.doc_string = 'the image'
Y = helper.make_tensor_value_info('scores', TensorProto.FLOAT, ['batch', 3])
Y.doc_string = 'class scores'
W = numpy_helper.from_array(np.ones((3, 4), np.float32), 'W')
g = helper.make_graph([helper.make_node('Gemm', ['image', 'W'], ['scores'], transB=1)], 'torch_jit', [X], [Y], [W],
                      doc_string='graph doc')
m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)], producer_name='pytorch', producer_version='1.13.0',
                      doc_string='my doc', model_version=7, domain='com.example')
helper.set_model_props(m, {'author': 'me', 'license': 'MIT'})
onnx.save(m, 'meta.onnx')
)");
  const Graph g = load_onnx(dir + "/meta.onnx");
  EXPECT_EQ(g.name, "meta");  // messages name it by its file
  save_onnx(g, dir + "/saved.onnx");
  // What train --save writes: the forward graph of the training pipeline, in its inference form.
  save_onnx(passes::to_inference(runtime::build_training_graphs(g, {}).forward), dir + "/trained.onnx");
  Graph renamed = g;
  renamed.name = "meta.cpu_0";  // a pass that names the graph anew (a replica's copy) writes its own name
  save_onnx(renamed, dir + "/renamed.onnx");
  run_onnx_python(dir, R"(
m = onnx.load('meta.onnx')
for f in ('saved.onnx', 'trained.onnx'):
    s = onnx.load(f)
    for k in ('doc_string', 'model_version', 'domain', 'producer_name', 'producer_version'):
        assert getattr(s, k) == getattr(m, k), (f, k, getattr(s, k))
    assert [(p.key, p.value) for p in s.metadata_props] == [('author', 'me'), ('license', 'MIT')], (f, s.metadata_props)
    assert s.graph.name == 'torch_jit' and s.graph.doc_string == 'graph doc', (f, s.graph.name, s.graph.doc_string)
    assert s.graph.input[0].doc_string == 'the image' and s.graph.output[0].doc_string == 'class scores', f
    onnx.checker.check_model(s, full_check=True)
assert onnx.load('renamed.onnx').graph.name == 'meta.cpu_0'
print('kept')
)");
  // Loaded again, the saved model reads as the original did.
  const Graph back = load_onnx(dir + "/saved.onnx");
  EXPECT_EQ(back.name, "saved");
  EXPECT_EQ(back.meta.props, g.meta.props);
  EXPECT_EQ(back.meta.value_docs, g.meta.value_docs);
}

// Opset 7's BatchNormalization with spatial=0 (statistics per element) is refused saying so, not with a
// rank error about its scale.
TEST(OnnxIo, SpatialZeroBatchNormIsRefusedNamingTheAttribute) {
  std::string dir = temp_dir("onnx_io_bn_spatial0");
  run_onnx_python(dir, R"(
inits = [numpy_helper.from_array(np.ones((3, 2, 2), np.float32), n) for n in ('s', 'b', 'm', 'v')]
g = helper.make_graph([helper.make_node('BatchNormalization', ['x', 's', 'b', 'm', 'v'], ['y'], spatial=0)], 'bn',
                      [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3, 2, 2])],
                      [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3, 2, 2])], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 7)]), 'bn.onnx')
)");
  try {
    load_onnx(dir + "/bn.onnx");
    ADD_FAILURE() << "spatial=0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attribute spatial=0 (statistics per element, opsets 7 and 8) is not supported"),
              std::string::npos) << e.what();
  }
}

// Opset 4's Reshape takes its shape as an attribute; onnx's converter makes it a Constant whose tensor has
// no dims but two values (its checker lets that pass): mended to one dimension, the model runs.
TEST(OnnxIo, OpsetFourReshapeRunsAfterConversion) {
  std::string dir = temp_dir("onnx_io_reshape4");
  run_onnx_python(dir, R"(
g = helper.make_graph([helper.make_node('Reshape', ['x'], ['y'], shape=[3, -1])], 'r4',
                      [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3, 2])],
                      [helper.make_tensor_value_info('y', TensorProto.FLOAT, [3, 4])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 4)]), 'r4.onnx')
np.save('x.npy', np.arange(12, dtype=np.float32).reshape(2, 3, 2))
)");
  auto r = run_command("cd '" + dir + "' && '" + testing::graphrun_cli() +
                       "' run r4.onnx --input x.npy --output-dir out 2>&1 && " + python() +
                       " -c \"import numpy as np; y = np.load('out/y.npy'); assert y.shape == (3, 4), y.shape; "
                       "assert (y == np.arange(12).reshape(3, 4)).all()\"");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace graphrun

namespace graphrun {
namespace {

// What torch.onnx.export writes (training-mode BatchNormalization with its extra outputs, Constant
// nodes, Pad+AveragePool, Shape/Gather/Concat/Reshape with a dynamic batch) survives a round trip.
TEST(OnnxIo, TorchExportRoundTrips) {
  std::string dir = temp_dir("onnx_io_torch");
  run_onnx_python(dir, R"(
import torch, torch.nn as nn, warnings
warnings.filterwarnings('ignore')
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(self):
        super().__init__(); self.c = nn.Conv2d(4, 4, 3, padding=1); self.bn = nn.BatchNorm2d(4)
    def forward(self, x):
        y = torch.relu(self.bn(self.c(x)) + x)
        return y.reshape(y.shape[0], -1)
net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2), Block(), nn.Linear(4 * 14 * 14, 10))
torch.onnx.export(net, torch.randn(2, 1, 28, 28), 'net.onnx', input_names=['image'], output_names=['logits'],
                  dynamic_axes={'image': {0: 'N'}, 'logits': {0: 'N'}}, training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False, opset_version=13)
)");
  Graph g = load_onnx(dir + "/net.onnx");
  EXPECT_EQ(g.values.at("image").str(), "f32[N,1,28,28]");
  EXPECT_EQ(g.values.at("logits").str(), "f32[N,10]");
  // Reshape(y, [y.shape[0], -1]): ONNX infers [N,?]; graphrun divides out N.
  int reshapes = 0;
  for (const Node& n : g.nodes)
    if (n.op_type == "Reshape") {
      ++reshapes;
      EXPECT_EQ(g.values.at(n.outputs[0]).str(), "f32[N,784]");
    }
  EXPECT_EQ(reshapes, 1);
  save_onnx(g, dir + "/saved.onnx");
  expect_python_valid(dir + "/saved.onnx");
  Graph h = load_onnx(dir + "/saved.onnx");
  EXPECT_EQ(h.name, "saved");  // the file keeps torch's "torch_jit", which reads as the file's name again
  h.name = g.name;
  EXPECT_EQ(print_text(h), print_text(g));
}

}  // namespace
}  // namespace graphrun

namespace graphrun {
namespace {

ValueInfo typed(DType t, std::vector<Dim> dims) {
  ValueInfo v;
  v.dtype = t;
  v.has_shape = true;
  v.shape = std::move(dims);
  return v;
}

// torch's attention reshapes to [T, N * heads, head_dim] with a target computed from Shape: ONNX cannot
// multiply the symbol N, so it knows neither the target's values nor the output's rank. The target's
// length is in its type: graphrun gives the output that rank, and the MatMuls behind it their ranks
// (their gradient rules need them).
TEST(OnnxIo, ReshapeToAComputedTargetKeepsItsRank) {
  std::string dir = temp_dir("onnx_io_reshape_rank");
  run_onnx_python(dir, R"(
import onnx, numpy as np
from onnx import helper as h, TensorProto as T, numpy_helper as nh
c = lambda name, v: h.make_node('Constant', [], [name], value=nh.from_array(np.array(v, np.int64)))
g = h.make_graph([h.make_node('Shape', ['x'], ['s']), c('i0', 0), c('two', 2), c('ax', [0]), c('rest', [-1, 4]),
                  h.make_node('Gather', ['s', 'i0'], ['n']), h.make_node('Mul', ['n', 'two'], ['n2']),
                  h.make_node('Unsqueeze', ['n2', 'ax'], ['n2u']), h.make_node('Concat', ['n2u', 'rest'], ['target'], axis=0),
                  h.make_node('Reshape', ['x', 'target'], ['r']), h.make_node('Transpose', ['r'], ['t'], perm=[0, 2, 1]),
                  h.make_node('MatMul', ['r', 't'], ['y']), h.make_node('ReduceSum', ['y'], ['sum'], keepdims=0)], 'attn',
                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 3, 8])], [h.make_tensor_value_info('sum', T.FLOAT, [])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'attn.onnx')
)");
  Graph g = load_onnx(dir + "/attn.onnx");
  for (const char* v : {"r", "t", "y"}) {
    ASSERT_TRUE(g.info(v) && g.info(v)->has_shape) << v;
    EXPECT_EQ(g.info(v)->shape.size(), 3u) << v << ": " << g.info(v)->str();
  }
  // propagate_shape_values multiplies the symbol ("2*N"), and the -1 is what is left of N * 3 * 8.
  EXPECT_EQ(g.info("r")->str(), "f32[2*N,3,4]");
  EXPECT_EQ(g.info("y")->str(), "f32[2*N,3,3]");
}

// torch's MultiheadAttention as exported: the packed projection sliced into q, k, v with bounds computed
// from its size ((E + 2) / 3, times 1, 2, 3), the heads split by a Reshape to [T, N * heads, E / heads]
// and merged back to [T * N, E]. Every size follows from the symbols: nothing is left unknown, so the
// gradient rules need no run-time shape computations (SumToShape) there.
TEST(OnnxIo, AttentionShapesComeOutAsProductsOfTheSymbols) {
  std::string dir = temp_dir("onnx_io_attention_dims");
  run_onnx_python(dir, R"(
import onnx, numpy as np
from onnx import helper as h, TensorProto as T, numpy_helper as nh
c = lambda name, v: h.make_node('Constant', [], [name], value=nh.from_array(np.array(v, np.int64)))
w = nh.from_array(np.zeros((12, 36), np.float32), 'w')
n = [h.make_node('MatMul', ['x', 'w'], ['p']), h.make_node('Shape', ['p'], ['ps']), c('last', [-1]), c('two', [2]),
     c('three', [3]), c('one', [1]), c('zero', [0]), c('heads', 4), c('i0', 0), c('i1', 1), c('i2', 2),
     h.make_node('Gather', ['ps', 'last'], ['e3']), h.make_node('Add', ['e3', 'two'], ['e3p']),
     h.make_node('Div', ['e3p', 'three'], ['e']), h.make_node('Mul', ['e', 'one'], ['e1']),
     h.make_node('Mul', ['e', 'two'], ['e2']),
     h.make_node('Slice', ['p', 'zero', 'e1', 'last'], ['q']), h.make_node('Slice', ['p', 'e1', 'e2', 'last'], ['k']),
     h.make_node('Shape', ['x'], ['xs']), h.make_node('Gather', ['xs', 'i0'], ['t']),
     h.make_node('Gather', ['xs', 'i1'], ['nb']), h.make_node('Gather', ['xs', 'i2'], ['d']),
     h.make_node('Mul', ['nb', 'heads'], ['nh']), h.make_node('Div', ['d', 'heads'], ['hd']),
     h.make_node('Cast', ['hd'], ['hdc'], to=T.INT64)]
for i, name in enumerate(['t', 'nh', 'hdc']):
  n.append(h.make_node('Unsqueeze', [name, 'zero'], [name + 'u']))
n += [h.make_node('Concat', ['tu', 'nhu', 'hdcu'], ['split'], axis=0),
      h.make_node('Reshape', ['q', 'split'], ['qh']), h.make_node('Reshape', ['k', 'split'], ['kh']),
      h.make_node('Transpose', ['qh'], ['qt'], perm=[1, 0, 2]), h.make_node('Transpose', ['kh'], ['kt'], perm=[1, 2, 0]),
      h.make_node('MatMul', ['qt', 'kt'], ['s']), h.make_node('Softmax', ['s'], ['a'], axis=-1),
      h.make_node('MatMul', ['a', 'qt'], ['o']), h.make_node('Transpose', ['o'], ['ot'], perm=[1, 0, 2]),
      h.make_node('Mul', ['t', 'nb'], ['tn']), h.make_node('Unsqueeze', ['tn', 'zero'], ['tnu']),
      h.make_node('Unsqueeze', ['d', 'zero'], ['du']), h.make_node('Concat', ['tnu', 'du'], ['merge'], axis=0),
      h.make_node('Reshape', ['ot', 'merge'], ['m']), h.make_node('ReduceSum', ['m'], ['sum'], keepdims=0)]
g = h.make_graph(n, 'mha', [h.make_tensor_value_info('x', T.FLOAT, ['T', 'N', 12])],
                 [h.make_tensor_value_info('sum', T.FLOAT, [])], [w])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'mha.onnx')
)");
  Graph g = load_onnx(dir + "/mha.onnx");
  const std::map<std::string, std::string> want = {{"q", "f32[T,N,12]"},    {"k", "f32[T,N,12]"},
                                                   {"qh", "f32[T,4*N,3]"},   {"qt", "f32[4*N,T,3]"},
                                                   {"s", "f32[4*N,T,T]"},    {"o", "f32[4*N,T,3]"},
                                                   {"m", "f32[N*T,12]"}};
  for (const auto& [v, str] : want) {
    ASSERT_TRUE(g.info(v)) << v;
    EXPECT_EQ(g.info(v)->str(), str) << v;
  }
}

// Swin's window partition at opset 13: the Reshape's input has a rank but no sizes (a Pad by computed pads) and
// its target is partly known; the output still has the target's rank (ReduceMean's axis -1 downstream needs it).
TEST(OnnxIo, ReshapeOfAnInputWithoutSizesKeepsTheTargetsRank) {
  std::string dir = temp_dir("onnx_io_reshape_unsized");
  run_onnx_python(dir, R"(
import onnx, numpy as np
from onnx import helper as h, TensorProto as T, numpy_helper as nh
c = lambda name, v: h.make_node('Constant', [], [name], value=nh.from_array(np.array(v, np.int64)))
g = h.make_graph([c('pads', [0, 0, 0, 0, 1, 0]), h.make_node('Mul', ['pads', 'k'], ['p']),
                  h.make_node('Pad', ['x', 'p'], ['xp']), h.make_node('Shape', ['xp'], ['s']), c('i1', 1),
                  c('ax', [0]), c('rest', [-1, 4]), h.make_node('Gather', ['s', 'i1'], ['m']),
                  h.make_node('Unsqueeze', ['m', 'ax'], ['mu']), h.make_node('Concat', ['mu', 'rest'], ['target'], axis=0),
                  h.make_node('Reshape', ['xp', 'target'], ['r']), h.make_node('ReduceMean', ['r'], ['y'], axes=[-1]),
                  h.make_node('ReduceSum', ['y'], ['sum'], keepdims=0)],
                 'window', [h.make_tensor_value_info('x', T.FLOAT, ['N', 3, 8]), h.make_tensor_value_info('k', T.INT64, [6])],
                 [h.make_tensor_value_info('sum', T.FLOAT, [])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'window.onnx')
)");
  Graph g = load_onnx(dir + "/window.onnx");
  ASSERT_TRUE(g.info("xp") && g.info("xp")->has_shape);
  EXPECT_FALSE(g.info("xp")->shape[1].known()) << g.info("xp")->str();  // the case: sizes unknown
  for (const char* v : {"r", "y"}) {
    ASSERT_TRUE(g.info(v) && g.info(v)->has_shape) << v;
    EXPECT_EQ(g.info(v)->shape.size(), 3u) << v << ": " << g.info(v)->str();
  }
  EXPECT_EQ(g.info("r")->shape[2].str(), "4") << g.info("r")->str();
}

// Every ai.graphrun schema types its outputs (docs/ops.md), and a graph of all of them exports checker-valid.
TEST(OnnxIo, EveryGraphrunOpIsTypedAndExportable) {
  Graph g;
  g.name = "all_ops";
  g.opsets[""] = 17;
  const Dim N(std::string("N"));
  auto input = [&](const std::string& name, ValueInfo vi) {
    g.inputs.push_back(name);
    g.values[name] = vi;
  };
  input("x", typed(DType::F32, {N, 3, 8, 8}));
  input("dy_pool", typed(DType::F32, {N, 3, 4, 4}));
  input("idx", typed(DType::I64, {N, 3, 4, 4}));
  input("w_t", typed(DType::F32, {3, 2, 3, 3}));  // ConvTranspose weight: C_in x C_out/group x k x k
  input("dy_t", typed(DType::F32, {N, 4, 10, 10}));
  input("scale", typed(DType::F32, {3}));
  input("log_prob", typed(DType::F32, {N, 10}));
  input("labels", typed(DType::I64, {N}));
  input("dloss", typed(DType::F32, {}));
  auto node = [&](const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                  std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.name = op;
    n.op_type = op;
    n.domain = kGraphrunDomain;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    n.attrs = std::move(attrs);
    g.add_node(n);
  };
  node("MaxPoolGrad", {"dy_pool", "idx", "x"}, {"dx_max"});
  node("AveragePoolGrad", {"dy_pool", "x"}, {"dx_avg"},
       {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}});
  node("ConvTransposeGrad", {"dy_t", "x", "w_t"}, {"dx_t", "dw_t", "db_t"},
       {{"kernel_shape", Attribute::Ints({3, 3})}, {"group", Attribute::Int(1)}});
  node("BatchNormalizationGrad", {"x", "x", "scale"}, {"dx_bn", "dscale", "dbias"}, {{"epsilon", Attribute::Float(1e-5f)}});
  node("SoftmaxCrossEntropyLossGrad", {"dloss", "log_prob", "labels"}, {"dscores"},
       {{"reduction", Attribute::Str("mean")}});
  g.outputs = {"dx_max", "dx_avg", "dx_t", "dw_t", "db_t", "dx_bn", "dscale", "dbias", "dscores"};
  infer_shapes(g);
  EXPECT_EQ(g.values.at("dx_max").str(), "f32[N,3,8,8]");
  EXPECT_EQ(g.values.at("dx_avg").str(), "f32[N,3,8,8]");
  EXPECT_EQ(g.values.at("dx_t").str(), "f32[N,3,8,8]");
  EXPECT_EQ(g.values.at("dw_t").str(), "f32[3,2,3,3]");
  EXPECT_EQ(g.values.at("db_t").str(), "f32[2]");
  EXPECT_EQ(g.values.at("dx_bn").str(), "f32[N,3,8,8]");
  EXPECT_EQ(g.values.at("dscale").str(), "f32[3]");
  EXPECT_EQ(g.values.at("dbias").str(), "f32[3]");
  EXPECT_EQ(g.values.at("dscores").str(), "f32[N,10]");
  std::string dir = temp_dir("onnx_io_all_ops");
  save_onnx(g, dir + "/all.onnx");
  expect_python_valid(dir + "/all.onnx");
  Graph h = load_onnx(dir + "/all.onnx");
  EXPECT_EQ(h.opset(kGraphrunDomain), 1);  // added on export: the graph used the domain without importing it
  g.opsets[kGraphrunDomain] = 1;
  EXPECT_EQ(print_text(h), print_text(g));
  // A wrongly typed input is caught by the C++ check, which knows the schemas (Python's does not).
  g.values["idx"].dtype = DType::F32;
  g.values.erase("dx_max");
  EXPECT_THROW(save_onnx(g, dir + "/bad.onnx"), Error);
}

}  // namespace
}  // namespace graphrun

namespace graphrun {
namespace {

// Any damage to a model file gives a graphrun::Error (or, rarely, a smaller valid model): never a crash.
TEST(OnnxIo, DamagedBytesNeverCrash) {
  std::string dir = temp_dir("onnx_io_damage");
  run_onnx_python(dir, kTinyModel);
  std::ifstream f(dir + "/tiny.onnx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  int errors = 0, loaded = 0;
  auto attempt = [&](const std::string& b) {
    try {
      Graph g = load_onnx_bytes(b, "damaged.onnx");
      ++loaded;
    } catch (const Error& e) {
      ++errors;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  for (size_t cut = 0; cut < bytes.size(); cut += 7) attempt(bytes.substr(0, cut));
  std::mt19937 rng(42);
  for (int i = 0; i < 300; ++i) {
    std::string b = bytes;
    for (int k = 0; k < 3; ++k) b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
    attempt(b);
  }
  EXPECT_GT(errors, 0);
  SUCCEED() << errors << " errors, " << loaded << " loaded";
}

// Resize as torch exports F.interpolate: scales from Concat(Constant, Constant), sizes from Shape + Slice +
// Concat. ONNX 1.12's inference leaves both outputs without a rank; the load-time fill gives rank and dims,
// and carries them on to a Reshape(Shape(...)) downstream (GroupNorm's), round after round.
TEST(OnnxIo, ResizeOutputsGetRankAndDimsAtLoad) {
  const std::string dir = temp_dir("onnx_resize_ranks");
  run_onnx_python(dir, R"(
f = lambda name, v: helper.make_node('Constant', [], [name], value=numpy_helper.from_array(np.array(v, np.float32)))
i = lambda name, v: helper.make_node('Constant', [], [name], value=numpy_helper.from_array(np.array(v, np.int64)))
nodes = [f('s01', [1, 1]), f('s23', [2, 2]), helper.make_node('Concat', ['s01', 's23'], ['scales'], axis=0),
         helper.make_node('Resize', ['x', '', 'scales'], ['up'], mode='nearest'),
         helper.make_node('Shape', ['up'], ['shp']), i('zero', [0]), i('two', [2]),
         helper.make_node('Slice', ['shp', 'zero', 'two'], ['nc']), i('hw', [5, 7]),
         helper.make_node('Concat', ['nc', 'hw'], ['sizes'], axis=0),
         helper.make_node('Resize', ['up', '', '', 'sizes'], ['sized'], mode='linear'),
         helper.make_node('Resize', ['sized', '', 'scales'], ['up2'], mode='nearest'),
         i('g', [0, 2, -1]), helper.make_node('Reshape', ['up2', 'g'], ['grouped']),
         helper.make_node('Shape', ['up2'], ['shp2']), helper.make_node('Reshape', ['grouped', 'shp2'], ['back']),
         helper.make_node('Identity', ['back'], ['y'])]
g = helper.make_graph(nodes, 'resize', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 4, 3, 3])],
                      [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['a', 'b', 'c', 'd'])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), 'm.onnx')
)");
  Graph g = load_onnx(dir + "/m.onnx");
  auto shape_of = [&](const std::string& v) {
    const ValueInfo* vi = g.info(v);
    if (!vi || !vi->has_shape) return std::string("none");
    std::string s;
    for (const Dim& d : vi->shape) s += (s.empty() ? "" : ",") + (d.known() ? std::to_string(d.size) : "?");
    return s;
  };
  EXPECT_EQ(shape_of("up"), "2,4,6,6");
  EXPECT_EQ(shape_of("sized"), "2,4,5,7");
  EXPECT_EQ(shape_of("up2"), "2,4,10,14");
  EXPECT_EQ(shape_of("back"), "2,4,10,14");
}

}  // namespace
}  // namespace graphrun
