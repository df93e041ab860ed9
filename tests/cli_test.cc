// `graphrun run` and `graphrun show` end to end: outputs checked with numpy, and every bad input gives
// exactly one line and exit code 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::CommandResult;
using testing::graphrun_cli;
using testing::python;
using testing::run_command;

// Models and tensors for these tests, written once per test into a folder of its own (ctest may run
// the tests of this file in parallel processes).
const std::string& data_dir() {
  static const std::string dir = [] {
    std::string d = testing::temp_dir(std::string("cli_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::ofstream(d + "/make.py") << R"(
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
def save(nodes, name, inputs, outputs, inits=[], opset=17):
    onnx.save(helper.make_model(helper.make_graph(nodes, name, inputs, outputs, inits),
                                opset_imports=[helper.make_opsetid('', opset), helper.make_opsetid('com.microsoft', 1)]),
              name + '.onnx')
f32 = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
# One input; an output whose name is not a safe file name.
bias = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], dtype=np.float32), 'bias')
save([helper.make_node('Relu', ['x'], ['r'], name='relu'), helper.make_node('Add', ['r', 'bias'], ['y/out:0'], name='add')],
     'relu', [f32('x', ['N', 3])], [f32('y/out:0', ['N', 3])], [bias])
# Two inputs, one of them int64.
save([helper.make_node('Relu', ['a'], ['ra'], name='relu_a'), helper.make_node('Neg', ['b'], ['nb'], name='neg_b')],
     'two', [f32('a', [2, 3]), helper.make_tensor_value_info('b', TensorProto.INT64, [2])],
     [f32('ra', [2, 3]), helper.make_tensor_value_info('nb', TensorProto.INT64, [2])])
# Two ops graphrun does not implement (valid ONNX: ONNX Runtime's com.microsoft ops).
save([helper.make_node('Inverse', ['m'], ['h'], name='inverse_node', domain='com.microsoft'),
      helper.make_node('MatMulNBits', ['h', 'm'], ['d'], name='nbits_node', domain='com.microsoft')],
     'unsupported', [f32('m', [1, 3, 3])], [f32('d', [1, 3, 3])])
# An image model that returns its input: run feeds an image file as training reads an image folder.
save([helper.make_node('Identity', ['image'], ['pixels'], name='id')], 'img', [f32('image', ['N', 3, 4, 5])],
     [f32('pixels', ['N', 3, 4, 5])])
save([helper.make_node('Identity', ['image'], ['pixels'], name='id')], 'grey', [f32('image', [1, 4, 5])], [f32('pixels', [1, 4, 5])])
from PIL import Image
rgb = np.random.RandomState(0).randint(0, 256, (4, 5, 3)).astype(np.uint8)
Image.fromarray(rgb).save('rgb.png')
np.save('rgb_chw.npy', rgb.transpose(2, 0, 1).astype(np.float32) / 255)
np.save('grey_chw.npy', np.asarray(Image.fromarray(rgb).convert('L'), np.float32)[None] / 255)
# A node name that is not UTF-8 (ONNX's proto2 strings are bytes; the checker accepts it).
save([helper.make_node('Relu', ['x'], ['r'], name='reluQQ')], 'badname', [f32('x', ['N', 3])], [f32('r', ['N', 3])])
bad = open('badname.onnx', 'rb').read().replace(b'reluQQ', b'relu\xff\xfe')
open('badname.onnx', 'wb').write(bad)
np.save('x.npy', np.array([[1, -2, 3], [-4, 5, -6]], dtype=np.float32))
open('x.pb', 'wb').write(numpy_helper.from_array(np.load('x.npy'), 'x').SerializeToString())
np.save('x_wide.npy', np.zeros((2, 4), dtype=np.float32))
np.save('x_f64.npy', np.zeros((2, 3), dtype=np.float64))
np.save('b.npy', np.array([7, -8], dtype=np.int64))
np.save('m.npy', np.eye(3, dtype=np.float32)[None])
data = open('relu.onnx', 'rb').read()
open('truncated.onnx', 'wb').write(data[:len(data) // 2])
open('corrupt.onnx', 'wb').write(data[:4] + b'\xff' * 40 + data[44:])
open('notonnx.onnx', 'w').write('just text\n')
)";
    auto r = run_command("cd '" + d + "' && " + python() + " make.py");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d;
  }();
  return dir;
}

CommandResult graphrun(const std::string& args) {
  return run_command("cd '" + data_dir() + "' && '" + graphrun_cli() + "' " + args);
}

// One line on stderr (and nothing on stdout), exit code 2, naming `what`.
void expect_one_line_error(const std::string& args, const std::vector<std::string>& what) {
  SCOPED_TRACE("graphrun " + args);
  CommandResult r = graphrun(args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("graphrun ", 0), 0u) << r.output;
  for (const auto& w : what) EXPECT_NE(r.output.find(w), std::string::npos) << "missing '" << w << "' in: " << r.output;
}

TEST(Cli, HelpForRunAndShow) {
  for (const char* cmd : {"run", "show"}) {
    CommandResult r = graphrun(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("usage: graphrun ") + cmd), std::string::npos) << r.output;
  }
  EXPECT_NE(graphrun("run --help").output.find("--output-dir"), std::string::npos);
  EXPECT_NE(graphrun("show --help").output.find("--format"), std::string::npos);
  // "graphrun help run" is "graphrun run --help" (it printed the top-level usage).
  for (const char* cmd : {"run", "train"}) {
    CommandResult r = graphrun(std::string("help ") + cmd);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, graphrun(std::string(cmd) + " --help").output);
  }
}

// Every command's help: exit 0, its usage first, every option in the two-column layout (name and
// metavariable, description from column 28; continuation lines indented to it), --help last; -h is
// the same; the top level lists the commands.
TEST(Cli, HelpOfEveryCommandIsLaidOutInTwoColumns) {
  for (const std::string cmd : {"run", "show", "grad", "train", "plan"}) {
    SCOPED_TRACE(cmd);
    CommandResult r = graphrun(cmd + " --help");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.rfind("usage: graphrun " + cmd + " ", 0), 0u) << r.output;
    EXPECT_EQ(graphrun(cmd + " -h").output, r.output);
    EXPECT_EQ(graphrun(cmd + " model.onnx --bogus --help").output, r.output);  // help wins over the rest
    const size_t begin = r.output.find("\noptions:\n"), end = r.output.find("\n\n", begin + 1);
    ASSERT_NE(begin, std::string::npos) << r.output;
    std::istringstream options(r.output.substr(begin + 10, end - begin - 10));
    std::string line, last;
    int n = 0;
    while (std::getline(options, line)) {
      if (line.rfind("  --", 0) == 0) {
        ++n;
        last = line;
        const size_t gap = line.find("  ", 4);
        if (gap != std::string::npos) {
          EXPECT_EQ(line.find_first_not_of(' ', gap), 28u) << line;
        }
      } else {
        EXPECT_EQ(line.find_first_not_of(' '), 28u) << "not a continuation line: '" << line << "'";
      }
    }
    EXPECT_GE(n, 4);
    EXPECT_EQ(last, "  --help                    show this help");
  }
  CommandResult top = graphrun("--help");
  EXPECT_EQ(top.exit_code, 0);
  for (const char* cmd : {"  run ", "  show ", "  grad ", "  train ", "  plan "}) EXPECT_NE(top.output.find(cmd), std::string::npos);
  // --version: the version and what the build has, the lines a bug report needs.
  CommandResult version = graphrun("--version");
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_EQ(version.output.rfind("graphrun 0.", 0), 0u) << version.output;
  for (const char* line : {"\n  CPU GEMM: ", "\n  CUDA: ", "\n  MPI: "}) EXPECT_NE(version.output.find(line), std::string::npos) << line;
  CommandResult unknown = graphrun("frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.output, "graphrun: unknown command 'frobnicate' (commands: run, show, grad, train, check, plan; see graphrun --help)\n");
}

// The forms a flag takes on the real command line, and one line with exit 2 for each misuse.
TEST(Cli, FlagFormsAndTheirErrors) {
  CommandResult a = graphrun("show relu.onnx --format dot"), b = graphrun("show relu.onnx --format=dot");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(graphrun("show --format=dot -- relu.onnx").output, a.output);
  expect_one_line_error("show relu.onnx --format", {"graphrun show: error: --format needs a value (FMT)"});
  expect_one_line_error("show relu.onnx --format text --format dot", {"--format given twice"});
  expect_one_line_error("show relu.onnx -o a.txt --output b.txt", {"--output given twice"});
  expect_one_line_error("show relu.onnx --backward=yes", {"--backward takes no value"});
  expect_one_line_error("show relu.onnx --fromat dot", {"unknown option --fromat", "see graphrun show --help"});
  expect_one_line_error("run relu.onnx -o x.npy", {"unknown option -o"});  // run has no --output
  expect_one_line_error("run relu.onnx --input x.npy --threads 1e3", {"--threads must be an integer, got '1e3'"});
  expect_one_line_error("run relu.onnx --input x.npy --threads 99999999999999999999", {"--threads is out of range"});
  expect_one_line_error("run relu.onnx relu.onnx --input x.npy", {"expected one model file, got 2"});
}

TEST(Cli, RunWritesEachOutputAsNpy) {
  CommandResult r = graphrun("run relu.onnx --input x.npy --output-dir out_relu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("y/out:0: f32[2,3] {1.5, -1, 5, 0.5, 4, 2}"), std::string::npos) << r.output;
  auto check = run_command("cd '" + data_dir() + "' && " + python() +
                           " -c \"import numpy as np; x = np.load('x.npy'); y = np.load('out_relu/y_out_0.npy');"
                           " assert y.dtype == np.float32 and y.shape == (2, 3);"
                           " assert np.array_equal(y, np.maximum(x, 0) + np.array([0.5, -1, 2], dtype=np.float32)), y\"");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  // The same input as an ONNX TensorProto file.
  r = graphrun("run relu.onnx --input x=x.pb");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "y/out:0: f32[2,3] {1.5, -1, 5, 0.5, 4, 2}\n");
  // Named inputs and a model with two of them; without --output-dir it only prints.
  r = graphrun("run two.onnx --input a=x.npy --input b=b.npy --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ra: f32[2,3] {1, 0, 3, 0, 5, 0}"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nb: i64[2] {-7, 8}"), std::string::npos) << r.output;
}

// --output-dir's files are checked before the run like --profile: one that is an --input file, or the
// --profile file, is one line and nothing is written (both were overwritten, exit 0).
TEST(Cli, RunOutputDirNeverReplacesWhatItReadsOrTheProfile) {
  auto mk = run_command("cd '" + data_dir() + "' && mkdir -p od_in && cp x.npy od_in/y_out_0.npy && rm -rf od_prof");
  ASSERT_EQ(mk.exit_code, 0) << mk.output;
  expect_one_line_error("run relu.onnx --input od_in/y_out_0.npy --output-dir od_in",
                        {"--output-dir od_in/y_out_0.npy is --input x's file this command reads"});
  auto same = run_command("cmp '" + data_dir() + "/x.npy' '" + data_dir() + "/od_in/y_out_0.npy'");
  EXPECT_EQ(same.exit_code, 0) << "the input was replaced";
  expect_one_line_error("run relu.onnx --input x.npy --output-dir od_prof --profile od_prof/y_out_0.npy",
                        {"--output-dir and --profile name the same file, od_prof/y_out_0.npy"});
  EXPECT_FALSE(std::filesystem::exists(data_dir() + "/od_prof/y_out_0.npy"));
}

// --input lists split at commas only before a new NAME= item (or an existing file): a path may hold
// commas ("given twice" before: the list split it into "x=dir" and two bare files).
TEST(Cli, RunInputPathsMayHoldCommas) {
  auto mk = run_command("cd '" + data_dir() + "' && mkdir -p 'dir,with,comma' && cp x.npy 'dir,with,comma/x.npy'" +
                        " && cp b.npy 'dir,with,comma/b,2.npy'");
  ASSERT_EQ(mk.exit_code, 0) << mk.output;
  CommandResult r = graphrun("run relu.onnx --input 'x=dir,with,comma/x.npy'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "y/out:0: f32[2,3] {1.5, -1, 5, 0.5, 4, 2}\n");
  r = graphrun("run relu.onnx --input 'dir,with,comma/x.npy'");  // one input: a bare file
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Lists still split before NAME=, with commas in the paths too.
  r = graphrun("run two.onnx --input 'a=dir,with,comma/x.npy,b=dir,with,comma/b,2.npy'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nb: i64[2] {-7, 8}"), std::string::npos) << r.output;
  // A comma before what looks like NAME= stays in a path that exists as the rest of the value.
  mk = run_command("cd '" + data_dir() + "' && mkdir -p 'lr=0.1,bs=32' && cp x.npy 'lr=0.1,bs=32/x.npy'");
  ASSERT_EQ(mk.exit_code, 0) << mk.output;
  r = graphrun("run relu.onnx --input 'x=lr=0.1,bs=32/x.npy'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = graphrun("run two.onnx --input a=x.npy,b=b.npy");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_one_line_error("run two.onnx --input a=x.npy,a=x.npy", {"input 'a' given twice"});
  expect_one_line_error("run relu.onnx --input 'x=x.npy,nothere'", {"x.npy,nothere"});
}

// A PNG or JPEG file feeds an image input: converted to its channels as PIL's convert, / 255, then
// --normalize (one mean and std, or one per channel); a batch of one.
TEST(Cli, RunTakesAnImageFileForAnImageInput) {
  CommandResult r = graphrun("run img.onnx --input rgb.png --output-dir out_img");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pixels: f32[1,3,4,5]"), std::string::npos) << r.output;
  r = graphrun("run grey.onnx --input image=rgb.png --output-dir out_grey");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = graphrun("run img.onnx --input image=rgb.png --normalize 0.5,0.25,1/1,2,4 --output-dir out_norm");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = graphrun("run img.onnx --input image=rgb.png --normalize 0.5,0.25 --output-dir out_norm1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto check = run_command("cd '" + data_dir() + "' && " + python() + " -c \"import numpy as np\n"
                           "rgb = np.load('rgb_chw.npy')\n"
                           "assert np.array_equal(np.load('out_img/pixels.npy'), rgb[None])\n"
                           "assert np.array_equal(np.load('out_grey/pixels.npy'), np.load('grey_chw.npy'))\n"
                           "m, s = np.array([.5, .25, 1], np.float32)[:, None, None], np.array([1, 2, 4], np.float32)[:, None, None]\n"
                           "assert np.allclose(np.load('out_norm/pixels.npy'), ((rgb - m) / s)[None], rtol=0, atol=1e-6)\n"
                           "assert np.allclose(np.load('out_norm1/pixels.npy'), ((rgb - .5) / .25)[None], rtol=0, atol=1e-6)\"");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  expect_one_line_error("run relu.onnx --input rgb.png", {"input 'x'", "f32[N,3]", "rgb.png", "[N,C,H,W]"});
  expect_one_line_error("run img.onnx --input rgb.png --normalize 0.5,0.25/1,2", {"2 means", "3 channels"});
  expect_one_line_error("run relu.onnx --input x.npy --normalize 0.5,0.25", {"--normalize", "image"});
  expect_one_line_error("run img.onnx --input x.png", {"x.png"});
}

// Inputs too large for the machine's memory stop in one line before any kernel runs (the shapes of LeNet's
// values at 64 images need 3.5 MB in the first convolution alone), not in the out-of-memory killer.
// GRAPHRUN_MEM_AVAILABLE_MB stands in for the memory available.
TEST(Cli, RunInputsTooLargeForTheMemoryAreOneLine) {
  auto mk = run_command("cd '" + data_dir() + "' && " + python() +
                        " -c \"import numpy as np; np.save('lenet64.npy', np.zeros((64, 1, 28, 28), np.float32))\"");
  ASSERT_EQ(mk.exit_code, 0) << mk.output;
  const std::string run = "cd '" + data_dir() + "' && GRAPHRUN_MEM_AVAILABLE_MB=";
  const std::string args = " '" + graphrun_cli() + "' run '" + testing::source_dir() + "/models/lenet.onnx' --input image=lenet64.npy";
  auto r = run_command(run + "1" + args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("the first run needs more than 921.6 KiB of memory for its activations (at least"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("counted before it runs; by that count at most 8 of its 64 along 'N' could fit); this "
                          "machine had 1.0 MiB available; run the model on fewer "
                          "examples at a time"),
            std::string::npos) << r.output;
  r = run_command(run + "40" + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("logits: f32[64,10]"), std::string::npos) << r.output;
}

TEST(Cli, RunBadInputsGiveOneLineAndExit2) {
  expect_one_line_error("run two.onnx --input a=x.npy", {"missing input b"});
  expect_one_line_error("run two.onnx --input a=x.npy --input b=b.npy --input c=b.npy", {"'c' is not an input"});
  expect_one_line_error("run two.onnx --input x.npy", {"needs a name", "a, b"});
  expect_one_line_error("run two.onnx --input a=x_wide.npy --input b=b.npy", {"'a'", "x_wide.npy", "f32[2,4]", "f32[2,3]"});
  expect_one_line_error("run two.onnx --input a=x_f64.npy --input b=b.npy", {"'a'", "x_f64.npy", "f64"});
  expect_one_line_error("run two.onnx --input a=x.npy --input b=x.npy", {"'b'", "i64[2]"});
  expect_one_line_error("run relu.onnx --input x=nothere.npy", {"nothere.npy", "no such file"});
  expect_one_line_error("run relu.onnx --input x=relu.onnx", {"relu.onnx", ".npy or .pb"});
  expect_one_line_error("run missing.onnx --input x.npy", {"missing.onnx", "no such file"});
  expect_one_line_error("run truncated.onnx --input x.npy", {"truncated.onnx"});
  expect_one_line_error("run corrupt.onnx --input x.npy", {"corrupt.onnx"});
  expect_one_line_error("run notonnx.onnx --input x.npy", {"notonnx.onnx", "not"});
  expect_one_line_error("run unsupported.onnx --input m.npy",
                        {"unsupported.onnx", "Inverse (node 'inverse_node')", "MatMulNBits (node 'nbits_node')"});
  expect_one_line_error("run", {"no model"});
  expect_one_line_error("run relu.onnx --input x.npy --threads zero", {"--threads"});
  expect_one_line_error("run relu.onnx --input x.npy --bogus", {"unknown option --bogus"});
}

// Output files are checked when a command starts, and never destroy a file the command reads: an
// output that is the model or a data file, or two outputs that are one file, are refused naming both;
// an unwritable place is refused before any work, naming the reason; --profile leaves an existing file
// alone when the run fails before writing it (it wrote an empty trace over it at the start).
TEST(Cli, OutputsNeverDestroyInputsAndAreCheckedFirst) {
  auto bytes = [](const std::string& f) {
    std::ifstream in(data_dir() + "/" + f, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string relu = bytes("relu.onnx");
  expect_one_line_error("show relu.onnx -o relu.onnx", {"--output relu.onnx is the model"});
  expect_one_line_error("show relu.onnx -o ./relu.onnx", {"is the model"});
  expect_one_line_error("grad relu.onnx -o relu.onnx", {"--output relu.onnx is the model"});
  expect_one_line_error("run relu.onnx --input x.npy --profile x.npy", {"--profile x.npy", "--input x"});
  expect_one_line_error("train relu.onnx --metrics relu.onnx", {"--metrics relu.onnx is the model"});
  expect_one_line_error("train relu.onnx --data x.npy --profile x.npy", {"--profile x.npy is --data's file"});
  expect_one_line_error("train relu.onnx --save s.onnx --metrics s.onnx", {"--metrics and --save name the same file"});
  // A file inside a --data folder (the test labels of an MNIST folder, say), at any depth.
  std::filesystem::create_directories(data_dir() + "/dfolder/sub");
  std::ofstream(data_dir() + "/dfolder/sub/t10k-labels-idx1-ubyte.gz") << "labels\n";
  expect_one_line_error("train relu.onnx --data dfolder --metrics dfolder/sub/t10k-labels-idx1-ubyte.gz",
                        {"--metrics dfolder/sub/t10k-labels-idx1-ubyte.gz is a file in --data's folder dfolder, which "
                         "this command reads: writing it could destroy the data"});
  expect_one_line_error("train relu.onnx --data x.npy --test-data ./dfolder --save dfolder/sub/t10k-labels-idx1-ubyte.gz",
                        {"is a file in --test-data's folder ./dfolder"});
  EXPECT_EQ(bytes("dfolder/sub/t10k-labels-idx1-ubyte.gz"), "labels\n");
  EXPECT_EQ(bytes("relu.onnx"), relu);
  EXPECT_EQ(bytes("x.npy").size(), 152u);
  expect_one_line_error("train relu.onnx --save nodir/s.onnx", {"--save nodir/s.onnx: cannot write there", "no directory 'nodir'"});
  expect_one_line_error("grad relu.onnx -o nodir/g.onnx", {"cannot write there"});
  expect_one_line_error("train relu.onnx --metrics .", {"--metrics .: cannot write there: it is a directory"});
  std::ofstream(data_dir() + "/old_trace.json") << "kept\n";
  CommandResult r = graphrun("train relu.onnx --data nothere.npz --profile old_trace.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(bytes("old_trace.json"), "kept\n");
}

// Writes that fail outside graphrun's files: standard output on a full device is an error, not exit 0;
// a file reaching the size limit (ulimit -f) is one line naming it, not a silent SIGXFSZ kill that left
// the temporary file behind.
TEST(Cli, OutputThatCannotBeWrittenIsAnError) {
  CommandResult r = run_command("(cd '" + data_dir() + "' && '" + graphrun_cli() + "' show relu.onnx > /dev/full)");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "graphrun show: error: cannot write to standard output\n");
  const std::string lenet = testing::source_dir() + "/models/lenet.onnx";
  if (!std::filesystem::exists(lenet)) GTEST_SKIP() << "models/lenet.onnx is missing";
  const std::string d = testing::temp_dir("cli_file_size_limit");
  r = run_command("(ulimit -f 64 && '" + graphrun_cli() + "' grad '" + lenet + "' -o '" + d + "/grad.onnx')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find(d + "/grad.onnx: cannot write: File too large"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(d)) << "a temporary file was left behind";
  // show -o and run's tensors are written whole or not at all too: the file before stays as it was.
  std::ofstream(d + "/graph.txt") << "old\n";
  r = run_command("(ulimit -f 1 && '" + graphrun_cli() + "' show '" + lenet + "' -o '" + d + "/graph.txt')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(d + "/graph.txt: cannot write: File too large"), std::string::npos) << r.output;
  std::ifstream old(d + "/graph.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(old), {}), "old\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d), std::filesystem::directory_iterator()), 1);
}

// A node name that is not UTF-8 goes into the --profile trace replaced, not as an internal error
// that left the trace empty.
TEST(Cli, ProfileOfANodeNameThatIsNotUtf8IsValidJson) {
  CommandResult r = graphrun("run badname.onnx --input x.npy --profile bad_trace.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto check = run_command("cd '" + data_dir() + "' && " + python() +
                           " -c \"import json; t = json.load(open('bad_trace.json'));"
                           " assert any('relu' in e.get('args', {}).get('node', '') for e in t['traceEvents']), t\"");
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

TEST(Cli, ShowPrintsTextAndDot) {
  CommandResult r = graphrun("show relu.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("  %r: f32[N,3] = Relu(%x)  # relu\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  %y/out:0: f32[N,3] = Add(%r, %bias)  # add\n"), std::string::npos) << r.output;

  r = graphrun("show relu.onnx --format dot -o relu.dot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.output.empty()) << r.output;
  auto dot = run_command("dot -Tsvg '" + data_dir() + "/relu.dot' -o /dev/null");
  EXPECT_EQ(dot.exit_code, 0) << dot.output;
  r = graphrun("show unsupported.onnx --format=dot");  // showing needs no kernels
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Inverse"), std::string::npos);

  expect_one_line_error("show relu.onnx --format xml", {"--format"});
  expect_one_line_error("show truncated.onnx", {"truncated.onnx"});
  expect_one_line_error("show relu.onnx -o /nonexistent-dir/x.txt", {"/nonexistent-dir/x.txt"});
}

}  // namespace
}  // namespace graphrun
