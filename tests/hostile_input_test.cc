// Hostile input through the command line: every file of the fuzz corpus (tests/fuzz/corpus, the classes
// of input that once crashed or fooled a reader) gives exit code 2 and one line; checkpoints that fail
// their checks are skipped for the newest good one, or refused when none is good.
#include <gtest/gtest.h>
#include <zlib.h>

#include <climits>
#include <filesystem>
#include <fstream>

#include "graph/tensor_io.h"
#include "runtime/checkpoint.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;

std::string corpus(const std::string& reader) { return testing::source_dir() + "/tests/fuzz/corpus/" + reader; }

// The files of one corpus folder whose names start with `prefix`, sorted.
std::vector<std::string> files(const std::string& reader, const std::string& prefix) {
  std::vector<std::string> r;
  for (const auto& e : fs::directory_iterator(corpus(reader)))
    if (e.path().filename().string().rfind(prefix, 0) == 0) r.push_back(e.path().string());
  std::sort(r.begin(), r.end());
  return r;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// Runs the CLI under a memory limit, so that an allocation the file does not justify fails here
// instead of swapping; with stderr_only, stdout is dropped. AddressSanitizer reserves terabytes of
// address space for its shadow memory, so under it the limit is ASan's own: one allocation over it,
// or a resident size over it, aborts the process (exit 134 or 1, not 2: the test fails).
CommandResult graphrun(const std::string& args, bool stderr_only = false) {
  std::string cmd = "'" + testing::graphrun_cli() + "' " + args;
  if (stderr_only) cmd = "{ " + cmd + " 2>&1 >/dev/null; }";
  const std::string limit = kAsan ? "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=7800:"
                                    "hard_rss_limit_mb=7800:allocator_may_return_null=0\"; "
                                  : "ulimit -v 8000000; ";
  return testing::run_command(limit + "export GRAPHRUN_MAX_TENSOR_MB=1024; " + cmd);
}

int lines(const std::string& s) {
  int n = static_cast<int>(std::count(s.begin(), s.end(), '\n'));
  return n + (!s.empty() && s.back() != '\n');
}

// Exit code 2 and exactly one line on stderr, starting "graphrun <cmd>: error:".
void expect_refused(const std::string& cmd, const std::string& args, const std::string& what = "") {
  SCOPED_TRACE("graphrun " + cmd + " " + args);
  CommandResult r = graphrun(cmd + " " + args, true);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_EQ(r.output.rfind("graphrun " + cmd + ": error: ", 0), 0u) << r.output;
  if (!what.empty()) {
    EXPECT_NE(r.output.find(what), std::string::npos) << "missing '" << what << "' in: " << r.output;
  }
}

// Sizes a file can ask for: refused with their size before anything is allocated, never wrapped.
TEST(HostileInput, SizesThatOverflowOrExceedTheLimitAreErrors) {
  EXPECT_THROW(shape_numel({int64_t{1} << 32, int64_t{1} << 32}), Error);  // 2^64 wraps to 0 in int64
  try {
    Tensor t(DType::F32, {int64_t{1} << 20, int64_t{1} << 20});
    ADD_FAILURE() << "allocated " << t.nbytes() << " bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 TiB), more than the limit of 16 GiB"), std::string::npos) << e.what();
  }
  // Pad's output size: 3 + 7.4e18 elements does not fit the limit; before, the index table was sized by it.
  Tensor x = Tensor::from_vector<float>({1, 3}, {1, 2, 3});
  Tensor pads = Tensor::from_vector<int64_t>({4}, {0, 7400000000000000000, 0, 0});
  EXPECT_THROW(testing::run_node("Pad", {x, pads}, {}, 1, 13), Error);
  pads = Tensor::from_vector<int64_t>({4}, {0, INT64_MAX, 0, INT64_MAX});
  EXPECT_THROW(testing::run_node("Pad", {x, pads}, {}, 1, 13), Error);  // dim + before + after overflows
}

TEST(HostileInput, EveryBadModelOfTheCorpusIsOneLineAndExit2) {
  const std::string d = testing::temp_dir("hostile_models");
  std::ofstream(d + "/x.npy");  // never read: the model is refused first
  const auto bad = files("onnx", "bad_");
  ASSERT_GE(bad.size(), 40u);
  for (const auto& f : bad) {
    expect_refused("show", "'" + f + "'", fs::path(f).filename().string());
    expect_refused("run", "'" + f + "' --input " + d + "/x.npy");
    expect_refused("grad", "'" + f + "' -o " + d + "/g.onnx");
  }
  for (const auto& f : files("onnx", "good_")) {
    CommandResult r = graphrun("show '" + f + "'");
    EXPECT_EQ(r.exit_code, 0) << f << "\n" << r.output;
  }
}

// What each class of the table is refused with: the node, the attribute and the allowed range.
TEST(HostileInput, MessagesNameTheNodeTheAttributeAndTheRange) {
  auto f = [](const char* name) { return "'" + corpus("onnx") + "/" + name + "'"; };
  expect_refused("show", f("bad_conv_strides_0.onnx"),
                 "node 'conv' (Conv): attribute 'strides' is [0,1]; each value must be in [1, ");
  expect_refused("show", f("bad_pool_strides_0.onnx"), "node 'pool' (MaxPool): attribute 'strides'");
  expect_refused("show", f("bad_conv_pads_length.onnx"), "attribute 'pads' has 2 values");
  expect_refused("show", f("bad_conv_pads_3_spatial.onnx"), "has 2 spatial axes, so it needs 2");
  expect_refused("show", f("bad_flatten_axis_99.onnx"), "node 'flatten' (Flatten): attribute 'axis' is 99");
  expect_refused("show", f("bad_softmax_axis_99.onnx"), "must be in [-2, 1]");
  expect_refused("show", f("bad_conv_rank0_image.onnx"), "has rank 0; Conv needs rank 3 to 5");
  expect_refused("show", f("bad_conv_rank2_image.onnx"), "has rank 2; Conv needs rank 3 to 5");
  expect_refused("show", f("bad_output_is_input.onnx"), "output 'image' is also a graph input");
  expect_refused("show", f("bad_conv_scalar_weight.onnx"), "weight input 'conv.w' (f32[]) has rank 0");
  expect_refused("show", f("bad_conv_int64_weight.onnx"), "has element type i64");
  expect_refused("show", f("bad_reshape_huge.onnx"), "more than the limit");
  expect_refused("show", f("bad_reshape_minus_7.onnx"), "holds -7");
  expect_refused("show", f("bad_reshape_zero.onnx"), "copies dimension 3 (0)");
  expect_refused("show", f("bad_matmul_as_conv.onnx"), "node 'fc' (Conv)");
  expect_refused("show", f("bad_pad_huge.onnx"), "node 'pad' (Pad)");
  expect_refused("show", f("bad_optional_input.onnx"), "optional/sequence types are not supported");
  expect_refused("show", f("bad_sequence_input.onnx"), "optional/sequence types are not supported");
  expect_refused("show", f("bad_expand_huge.onnx"), "more than the limit");
  expect_refused("show", f("bad_initializer_typed_huge.onnx"), "more than the limit");
  expect_refused("show", f("bad_slice_step_huge.onnx"),
                 "node 'slice' (Slice): steps input 'steps' (i64[1]) is [2147483648]; each value must be in");
  expect_refused("show", f("bad_if_on_data.onnx"), "node 'if' (If): its condition 'cond' depends on the input data");
  expect_refused("show", f("bad_if_branch_huge.onnx"), "more than the limit");
  expect_refused("show", f("bad_conv_no_kernel_weight_rank_5.onnx"),
                 "has rank 5; it must have the rank of input 'image'");
}

TEST(HostileInput, BadTensorFilesAreOneLineAndExit2) {
  // A model with one input x: f32[2,3] (the good corpus files fit it).
  const std::string d = testing::temp_dir("hostile_tensors");
  auto r = testing::run_command("cd '" + d + "' && " + testing::python() + " -c \"" +
                                "import onnx; from onnx import helper as h, TensorProto as T; "
                                "onnx.save(h.make_model(h.make_graph([h.make_node('Relu', ['x'], ['y'])], 'g', "
                                "[h.make_tensor_value_info('x', T.FLOAT, [2, 3])], "
                                "[h.make_tensor_value_info('y', T.FLOAT, [2, 3])]), "
                                "opset_imports=[h.make_opsetid('', 13)]), 'relu.onnx')\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string model = d + "/relu.onnx";
  for (const char* reader : {"npy", "pb"})
    for (const auto& f : files(reader, "bad_"))
      expect_refused("run", model + " --input 'x=" + f + "'", fs::path(f).filename().string());
  expect_refused("run", model + " --input x=" + corpus("pb") + "/bad_name_mismatch.pb",
                 "holds the tensor 'labels', not 'x'");
  expect_refused("run", model + " --input x=" + corpus("npy") + "/bad_double_comma.npy", "not a valid .npy file");
  expect_refused("run", model + " --input x=" + corpus("npy") + "/bad_plus_sign.npy", "not a valid .npy file");
  expect_refused("run", model + " --input x=" + corpus("npy") + "/bad_unterminated.npy", "truncated");
  for (const char* good : {"npy/good_f32_2x3.npy", "pb/good_x.pb"}) {
    r = graphrun("run " + model + " --input x=" + corpus("") + good);
    EXPECT_EQ(r.exit_code, 0) << good << "\n" << r.output;
  }
}

// Optional- and sequence-typed graph outputs (inputs: MessagesNameTheNodeTheAttributeAndTheRange) are
// refused with one line naming the value, before any op or allocation, where graphrun cannot follow them (a
// SplitToSequence with split sizes the data decide; show and grad, which have no run's values).
TEST(HostileInput, OptionalAndSequenceOutputsAreOneLineAndExit2) {
  const std::string d = testing::temp_dir("hostile_seq_outputs");
  auto r = testing::run_command(
      "cd '" + d + "' && " + testing::python() + " -c \"" +
      "import onnx; from onnx import helper as h, TensorProto as T; "
      "x = h.make_tensor_value_info('x', T.FLOAT, [4]); "
      "t = h.make_tensor_type_proto(T.FLOAT, [2]); "
      "xn = h.make_tensor_value_info('x', T.FLOAT, ['N']); "
      "onnx.save(h.make_model(h.make_graph([h.make_node('SplitToSequence', ['x'], ['pieces'])], 'g', [xn], "
      "[h.make_value_info('pieces', h.make_sequence_type_proto(t))]), "
      "opset_imports=[h.make_opsetid('', 15)]), 'seq.onnx'); "
      "onnx.save(h.make_model(h.make_graph([h.make_node('Cast', ['x'], ['sizes'], to=T.INT64), "
      "h.make_node('SplitToSequence', ['x', 'sizes'], ['pieces'])], 'g', [xn], "
      "[h.make_value_info('pieces', h.make_sequence_type_proto(t))]), "
      "opset_imports=[h.make_opsetid('', 15)]), 'seq_data.onnx'); "
      "onnx.save(h.make_model(h.make_graph([h.make_node('Optional', ['x'], ['maybe'])], 'g', [x], "
      "[h.make_value_info('maybe', h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [4])))]), "
      "opset_imports=[h.make_opsetid('', 15)]), 'opt.onnx'); "
      "import numpy as np; np.save('x.npy', np.zeros(4, np.float32))\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_refused("run", d + "/seq_data.onnx --input " + d + "/x.npy",
                 "output 'pieces' has a sequence type: optional/sequence types are not supported");
  expect_refused("show", d + "/opt.onnx",
                 "output 'maybe' has an optional type: optional/sequence types are not supported");
  expect_refused("grad", d + "/seq.onnx",
                 "output 'pieces' has a sequence type: optional/sequence types are not supported");
  // graphrun run follows a sequence whose count its input's shape gives, and an optional it can see the value of
  // (an optional output holding x).
  r = graphrun("run " + d + "/seq.onnx --input " + d + "/x.npy");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pieces: sequence of 4 tensors\n  pieces[0]: f32[1] {0}"), std::string::npos) << r.output;
  r = graphrun("run " + d + "/opt.onnx --input " + d + "/x.npy");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("maybe: optional holding a tensor\n  maybe[0]: f32[4] {0, 0, 0, 0}"), std::string::npos)
      << r.output;
}

// A Reshape to a size the next MatMul cannot take, then an Add: ONNX cannot type the MatMul, and the
// backward graph reads that value's Shape. ONNX's data propagation of Shape crashed on an untyped input;
// now `grad` refuses the model in one line, and `show --backward` prints the graph.
TEST(HostileInput, AShapeOfAValueInferenceCouldNotTypeIsNoCrash) {
  const std::string d = testing::temp_dir("hostile_untyped_shape");
  auto r = testing::run_command(
      "cd '" + d + "' && " + testing::python() + " -c \"" +
      "import onnx, numpy as np; from onnx import helper as h, TensorProto as T, numpy_helper as nh; "
      "c = lambda n, v: h.make_node('Constant', [], [n], value=nh.from_array(np.array(v, np.int64))); "
      "g = h.make_graph([h.make_node('Shape', ['x'], ['s']), c('i0', 0), h.make_node('Gather', ['s', 'i0'], ['n']), "
      "c('ax', [0]), h.make_node('Unsqueeze', ['n', 'ax'], ['n1']), c('m', [17]), "
      "h.make_node('Concat', ['n1', 'm'], ['shape'], axis=0), h.make_node('Reshape', ['x', 'shape'], ['r']), "
      "h.make_node('MatMul', ['r', 'W'], ['h0']), h.make_node('Add', ['h0', 'b'], ['h1']), "
      "h.make_node('MatMul', ['h1', 'W2'], ['logits'])], 'g', [h.make_tensor_value_info('x', T.FLOAT, ['N', 16])], "
      "[h.make_tensor_value_info('logits', T.FLOAT, ['N', 10])], [nh.from_array(np.ones((16, 8), np.float32), 'W'), "
      "nh.from_array(np.zeros(8, np.float32), 'b'), nh.from_array(np.ones((8, 10), np.float32), 'W2')]); "
      "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), 'bad.onnx')\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_refused("grad", d + "/bad.onnx -o " + d + "/bad.grad.onnx", "Incompatible dimensions");
  CommandResult shown = graphrun("show " + d + "/bad.onnx --backward", true);
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
}

// A folder of MNIST-format data: 8 training and 4 test images of 28x28, gzipped.
void write_idx(const std::string& path, const std::string& header_and_data) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, header_and_data.data(), static_cast<unsigned>(header_and_data.size()));
  gzclose(f);
}

std::string be32(uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }

void write_tiny_mnist(const std::string& dir) {
  for (auto [prefix, n] : {std::pair<const char*, int>{"train", 8}, {"t10k", 4}}) {
    std::string images = std::string{0, 0, 8, 3} + be32(n) + be32(28) + be32(28),
                labels = std::string{0, 0, 8, 1} + be32(n);
    for (int i = 0; i < n * 28 * 28; ++i) images += char((i * 37) % 251);
    for (int i = 0; i < n; ++i) labels += char(i % 10);
    write_idx(dir + "/" + prefix + "-images-idx3-ubyte.gz", images);
    write_idx(dir + "/" + prefix + "-labels-idx1-ubyte.gz", labels);
  }
}

std::string lenet() { return testing::source_dir() + "/models/lenet.onnx"; }

TEST(HostileInput, BadIdxFilesAreOneLineAndExit2) {
  for (const auto& f : files("idx", "bad_")) {
    const std::string d = testing::temp_dir("hostile_idx");
    write_tiny_mnist(d);
    const std::string name = fs::path(f).filename().string();
    const std::string target =
        d + "/train-images-idx3-ubyte" + (name.size() > 3 && name.substr(name.size() - 3) == ".gz" ? ".gz" : "");
    fs::remove(d + "/train-images-idx3-ubyte.gz");
    fs::copy_file(f, target);
    expect_refused("train", lenet() + " --data " + d + " --epochs 1 --batch-size 4", "train-images-idx3-ubyte");
  }
  const std::string d = testing::temp_dir("hostile_idx_garbage");
  write_tiny_mnist(d);
  std::ofstream(d + "/train-images-idx3-ubyte.gz", std::ios::app) << "garbage!";
  expect_refused("train", lenet() + " --data " + d + " --epochs 1 --batch-size 4",
                 "trailing garbage after the gzip data");
}

struct CheckpointRun {
  std::string data, ck, args;  // args: all but --epochs
};

// Trains the tiny data for 2 epochs with a checkpoint every step: ckpt-1..4 (epochs 1 and 2 end on steps 2 and 4).
CheckpointRun trained(const std::string& name) {
  CheckpointRun c;
  c.data = testing::temp_dir(name);
  write_tiny_mnist(c.data);
  c.ck = c.data + "/ck";
  c.args = lenet() + " --data " + c.data + " --batch-size 4 --devices cpu:1 --checkpoint-dir " + c.ck +
           " --checkpoint-every 1 --keep-checkpoints 10";
  CommandResult r = graphrun("train " + c.args + " --epochs 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return c;
}

std::vector<std::string> checkpoints(const std::string& dir) {
  std::vector<std::string> r;
  for (const auto& e : fs::directory_iterator(dir)) r.push_back(e.path().string());
  std::sort(r.begin(), r.end());
  return r;
}

TEST(HostileInput, CorruptNewestCheckpointIsSkippedForTheNewestGoodOne) {
  if (!fs::exists(lenet())) GTEST_SKIP() << "models/lenet.onnx is missing";
  CheckpointRun c = trained("hostile_ck_skip");
  auto all = checkpoints(c.ck);
  ASSERT_GE(all.size(), 3u);
  // Flip one byte of the newest: its CRC fails; --resume takes the one before, with a warning naming it.
  {
    std::fstream f(all.back(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  CommandResult r = graphrun("train " + c.args + " --resume --epochs 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: skipping checkpoint " + all.back()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checksum mismatch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from " + all[all.size() - 2]), std::string::npos) << r.output;
}

TEST(HostileInput, CheckpointsWithAValidCrcAndAbsurdContentsAreRefused) {
  if (!fs::exists(lenet())) GTEST_SKIP() << "models/lenet.onnx is missing";
  CheckpointRun c = trained("hostile_ck_contents");
  const std::string newest = checkpoints(c.ck).back();
  runtime::Checkpoint good = runtime::load_checkpoint(newest);
  auto rewrite = [&](auto edit) {
    runtime::Checkpoint ck = good;
    edit(ck);
    runtime::save_checkpoint(newest, ck);  // a valid CRC over the edited contents
  };
  for (auto [key, value] :
       {std::pair<const char*, const char*>{"epoch", "99999"}, {"step", "1000000000"}, {"global_step", "-3"}}) {
    rewrite([&](runtime::Checkpoint& ck) { ck.meta[key] = value; });
    expect_refused("train", c.args + " --epochs 2 --resume", "cannot happen");
  }
  // NaN weights fail the contents check: like a failed CRC, the checkpoint is skipped.
  rewrite([&](runtime::Checkpoint& ck) {
    Tensor w = ck.tensors.begin()->second.clone();
    w.data<float>()[0] = std::nanf("");
    ck.tensors.begin()->second = w;
  });
  CommandResult r = graphrun("train " + c.args + " --resume --epochs 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("holds NaN or Inf"), std::string::npos) << r.output;
  // Every checkpoint corrupt: refused, not a silent restart.
  for (const auto& f : checkpoints(c.ck)) std::ofstream(f, std::ios::trunc) << "junk";
  expect_refused("train", c.args + " --epochs 2 --resume", "none of its");
}

TEST(HostileInput, AStaleTemporaryCheckpointIsRemoved) {
  if (!fs::exists(lenet())) GTEST_SKIP() << "models/lenet.onnx is missing";
  CheckpointRun c = trained("hostile_ck_tmp");
  const std::string stale = c.ck + "/ckpt-000000-000000001.grck.tmp";  // as a kill mid-write leaves it
  std::ofstream(stale) << "half a checkpoint";
  CommandResult r = graphrun("train " + c.args + " --resume --epochs 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(stale));
  for (const auto& f : checkpoints(c.ck)) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
}

}  // namespace
}  // namespace graphrun
