// Models nobody here wrote, as users export them: small torchvision ViT, ConvNeXt and ShuffleNet V2, a
// segmentation UNet, spatial transformers (GridSample), a CNN with LocalResponseNorm, a Glow step (Det), recurrent and transformer text classifiers (random weights, tests/zoo_parity.py), forward (eval
// export) and gradients (training export through attach_loss + backward) against PyTorch in float64, at opsets 13 to 17.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "autodiff/autodiff.h"
#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "graph/passes/convert_opset.h"
#include "runtime/executor.h"
#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace graphrun::testing {
namespace {

double scale_of(const Tensor& t) {
  double s = 0;
  for (double v : t.as_doubles()) s = std::max(s, std::fabs(v));
  return s;
}

// The worst errors found, each relative to its tolerance (<= 1 passes).
struct ZooResult {
  double logits = 0, loss = 0, grads = 0;
  std::string worst_param;
  bool ran = false;  // the export and both runs happened
};

// functions: torch exports every module as a model-local function (export_modules_as_functions), which
// graphrun inlines on load.
ZooResult check_zoo_model(const std::string& name, int opset, int size = 32, int batch = 2, bool functions = false) {
  ZooResult res;
  const std::string dir = temp_dir("zoo_" + name + "_" + std::to_string(opset) + (functions ? "_functions" : ""));
  auto py = run_command(python() + " " + source_dir() + "/tests/zoo_parity.py " + name + " " + dir + " --opset " +
                        std::to_string(opset) + " --size " + std::to_string(size) + " --batch " +
                        std::to_string(batch) + (functions ? " --functions" : "") + " 2>&1");
  if (py.exit_code != 0 && py.output.find("No module named 'torchvision'") != std::string::npos) {
    ADD_FAILURE() << python() << " lacks torchvision (python3-torchvision)";
    return res;
  }
  EXPECT_EQ(py.exit_code, 0) << py.output;
  if (py.exit_code != 0) return res;
  // The model's one input: an image, or token ids (the text classifiers).
  const std::string input = std::ifstream(dir + "/tokens.npy").good() ? "tokens" : "image";
  Tensor x = read_npy(dir + "/" + input + ".npy"), labels = read_npy(dir + "/labels.npy");

  // Forward: the eval-mode export against model.eval().
  {
    runtime::Executor ex(load_onnx(dir + "/eval.onnx"));
    Tensor logits = ex.run({{input, x}}).at("logits");
    Tensor want = read_npy(dir + "/logits.npy");
    res.logits = max_abs_diff(logits, want) / (1e-4 * std::max(1.0, scale_of(want)));
    EXPECT_LE(res.logits, 1) << name << " opset " << opset << " logits";
  }
  // Gradients: the training-mode export with graphrun's loss against torch autograd.
  // (As train and check read it: below opset 13 converted to opset 15, pads computed from Constants folded.)
  Graph bg = autodiff::backward(autodiff::attach_loss(
      runtime::fold_pads_on_cpu(passes::convert_opset_for_training(load_onnx(dir + "/train.onnx")))));
  runtime::Executor ex(bg);
  auto out = ex.run({{input, x}, {"labels", labels}});
  const double loss = read_npy(dir + "/loss.npy").as_doubles()[0];
  res.loss = std::fabs(out.at("loss").as_doubles()[0] - loss) / (1e-4 * std::max(1.0, std::fabs(loss)));
  EXPECT_LE(res.loss, 1) << name << " loss";
  std::map<std::string, Tensor> grads;
  std::ifstream names(dir + "/params.txt");
  for (std::string p; std::getline(names, p);)
    if (!p.empty()) grads[p] = read_npy(dir + "/" + p + ".npy");
  EXPECT_FALSE(grads.empty());
  std::map<std::string, double> f32_error;  // torch float32's own error per gradient
  std::ifstream errors(dir + "/float32_errors.txt");
  for (std::string p; errors >> p;) errors >> f32_error[p];
  double model_scale = 0;
  for (const auto& [p, g] : grads) model_scale = std::max(model_scale, scale_of(g));
  for (const auto& [p, g] : grads) {
    // Each gradient relative to its own scale, floored at 1e-3 of the model's largest (a bias before
    // a training-mode BatchNorm has an exact-zero gradient: float noise on both sides).
    const double scale = std::max(scale_of(g), 1e-3 * model_scale);
    EXPECT_TRUE(out.count(p + "_grad")) << name << ": no gradient output for " << p;
    if (!out.count(p + "_grad")) continue;
    const Tensor& got = out.at(p + "_grad");
    EXPECT_EQ(shape_str(got.shape()), shape_str(g.shape())) << p;
    if (got.shape() != g.shape()) continue;
    // Within max(1e-4, 10x torch float32's own error): graphrun computes in float32 too.
    const double tol = std::max(1e-4, 10 * f32_error[p]);
    const double e = max_abs_diff(got, g) / scale / tol;
    EXPECT_LE(e, 1) << name << " opset " << opset << ": gradient of " << p;
    if (e > res.grads) res.grads = e, res.worst_param = p;
  }
  // Every parameter of torch's, and no more: the buffers exported as initializers are frozen, as a user freezes them.
  std::set<std::string> buffers;
  std::ifstream buffer_names(dir + "/buffers.txt");
  for (std::string b; std::getline(buffer_names, b);)
    if (!b.empty()) buffers.insert(b);
  EXPECT_EQ(grads.size(), autodiff::trainable_params(bg, buffers).size()) << name;
  res.ran = true;
  return res;
}

void skip_without_torchvision() {
  if (run_command(python() + " -c 'import torchvision' 2>&1").exit_code != 0)
    GTEST_SKIP() << python() << " lacks torchvision (python3-torchvision)";
}

TEST(Zoo, VisionTransformerOpset17) { skip_without_torchvision(); check_zoo_model("vit", 17); }
TEST(Zoo, VisionTransformerOpset15) { skip_without_torchvision(); check_zoo_model("vit", 15); }  // LayerNorm decomposed by torch
TEST(Zoo, ConvNeXtOpset17) { skip_without_torchvision(); check_zoo_model("convnext", 17); }
// 64x64: at 32x32 stage 4 is 1x1, and training-mode BatchNorm over 2 values is so ill-conditioned that
// torch's own float32 and float64 outputs differ by 0.7.
TEST(Zoo, ShuffleNetV2Opset17) { skip_without_torchvision(); check_zoo_model("shufflenet", 17, 64); }
// A segmentation UNet (tests/zoo_parity.py): GroupNorm and InstanceNorm, Resize in nearest, half_pixel bilinear and
// align_corners bilinear to a size, Concat skips, cross-entropy per pixel.
// `graphrun check` gives it the passing verdict.
// Spatial transformers (GridSample, opset 16 and up): every mode, every padding, both corner conventions, through a
// grid computed from the image (so the grid's gradient reaches the localisation net's weights).
TEST(Zoo, SpatialTransformerBilinearZeros) { skip_without_torchvision(); check_zoo_model("stn", 16, 16); }
TEST(Zoo, SpatialTransformerBilinearReflection) {
  skip_without_torchvision();
  check_zoo_model("stn_bilinear_reflection", 17, 16);
}
TEST(Zoo, SpatialTransformerBicubicReflectionAlignCorners) {
  skip_without_torchvision();
  check_zoo_model("stn_bicubic_reflection", 17, 16);
}
TEST(Zoo, SpatialTransformerBicubicBorder) { skip_without_torchvision(); check_zoo_model("stn_bicubic_border", 16, 16); }
TEST(Zoo, SpatialTransformerNearestBorderAlignCorners) {
  skip_without_torchvision();
  check_zoo_model("stn_nearest_border", 17, 16);
}
// PyTorch's tutorial start: the localisation net's last layer zeroed, its bias the identity, so the grid samples
// exactly at pixel centres (rows and columns 3, 10, 17, 24 of 28 exactly, in float32): bilinear interpolation's
// corners, where graphrun takes the same one-sided derivative as torch.
TEST(Zoo, SpatialTransformerTutorialIdentityGrid) { skip_without_torchvision(); check_zoo_model("stn_tutorial", 16, 28); }
// A DCGAN-style decoder: ConvTranspose2d with stride, padding, output_padding and groups, BatchNorm, LeakyReLU, Tanh.
TEST(Zoo, UpsamplingNetConvTransposeOpset17) { skip_without_torchvision(); check_zoo_model("upsampling", 17, 16); }
// GlobalMaxPool's MaxPool form, TopK, CumSum, Trilu, and boolean indexing (NonZero + GatherND) in one head.
TEST(Zoo, PoolingHeadsTopKCumSumTriluMaskOpset17) { skip_without_torchvision(); check_zoo_model("pooling_heads", 17, 16); }
// torch.jit.script loops (a recurrent cell over the rows of a feature map, a while loop over a counter), unrolled when
// the model loads.
TEST(Zoo, ScriptedLoopsUnrolledOpset13) { skip_without_torchvision(); check_zoo_model("scripted_loops", 13, 8); }
TEST(Zoo, ScriptedLoopsUnrolledOpset17) { skip_without_torchvision(); check_zoo_model("scripted_loops", 17, 8); }
// torchvision.ops.roi_pool (ONNX MaxRoiPool) in a Fast R-CNN-style head (tests/zoo_parity.py RoiPoolHead): regions
// past the image and thinner than a bin; forward and gradients against torchvision's own kernel and autograd.
TEST(Zoo, RoiPoolHeadOpset11) {
  skip_without_torchvision();
  check_zoo_model("roi_pool", 11, 16);
}
TEST(Zoo, RoiPoolHeadOpset17) {
  skip_without_torchvision();
  check_zoo_model("roi_pool", 17, 16);
}
// nn.LocalResponseNorm: its export pads the channel axis by pads computed from Constants and squeezes through an
// If on the padded shape, which graphrun takes at load (passes::inline_static_ifs); opset 13 and 17.
TEST(Zoo, LocalResponseNormOpset17) { skip_without_torchvision(); check_zoo_model("lrn", 17, 16); }
TEST(Zoo, LocalResponseNormOpset13) { skip_without_torchvision(); check_zoo_model("lrn", 13, 16); }
// At opset 9 torch writes LRN's channel padding as a constant Pad without `value`, which onnx's version
// converter (a training run below opset 13 converts to 15) read unchecked and failed on.
TEST(Zoo, LocalResponseNormOpset9) { skip_without_torchvision(); check_zoo_model("lrn", 9, 16); }
// A GRU reader with a GRUCell attention decoder (tests/zoo_parity.py attention): at opsets 9 and 10 its
// torch.cat(..., -1) is a Concat with axis -1, which ONNX's inference of those opsets refuses, leaving every
// value after it without a rank (graphrun counts the axis from the front: passes::fill_old_negative_axes)
// and the converter failing on the Softmax it could not size.
TEST(Zoo, AttentionReaderOpset9) { skip_without_torchvision(); check_zoo_model("attention", 9, 8); }
TEST(Zoo, AttentionReaderOpset11) { skip_without_torchvision(); check_zoo_model("attention", 11, 8); }
// A Glow-style flow step: an invertible 1x1 convolution's log-determinant (torch.logdet: Log(Det)) in the loss.
TEST(Zoo, GlowStepLogDeterminantOpset17) { skip_without_torchvision(); check_zoo_model("glow", 17, 16); }
TEST(Zoo, UNetOpset17) {
  skip_without_torchvision();
  if (!check_zoo_model("unet", 17).ran) return;
  auto r = run_command(graphrun_cli() + " check " + binary_dir() + "/test_tmp/zoo_unet_17/train.onnx 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
}
TEST(Zoo, UNetOpset13) { skip_without_torchvision(); check_zoo_model("unet", 13); }
// Recurrent classifiers reading the image row by row (tests/zoo_parity.py RowSequence): nn.LSTM, nn.GRU and nn.RNN
// with 2 bidirectional layers or 1 forward layer, batch_first or time first (torch exports ONNX LSTM/GRU/RNN nodes).
TEST(Zoo, LstmTwoBidirectionalLayersBatchFirst) { skip_without_torchvision(); check_zoo_model("lstm", 14, 8); }
TEST(Zoo, GruTwoBidirectionalLayersTimeFirst) { skip_without_torchvision(); check_zoo_model("gru", 14, 8); }
TEST(Zoo, LstmOneLayerOpset17) { skip_without_torchvision(); check_zoo_model("lstm1", 17, 8); }
TEST(Zoo, GruOneLayerOpset13) { skip_without_torchvision(); check_zoo_model("gru1", 13, 8); }
TEST(Zoo, RnnTanhTwoBidirectionalLayersBatchFirst) { skip_without_torchvision(); check_zoo_model("rnn", 14, 8); }
TEST(Zoo, RnnReluOneLayerOpset17) { skip_without_torchvision(); check_zoo_model("rnn_relu1", 17, 8); }
// Text classifiers as users write them (tests/zoo_parity.py TextClassifier): int64 token ids padded with 0,
// nn.Embedding(padding_idx=0) (Gather and its scatter-add gradient), a learned position embedding sliced to the
// length, nn.TransformerEncoder with src_key_padding_mask (Equal, Where into -inf before Softmax), the mean over
// the real tokens; post-norm GELU (Erf), and pre-norm ReLU with a causal mask as well. 12 tokens, 3 sequences of
// lengths 12, 6 and 4.
// nn.EmbeddingBag's Loop over the bags (mean, max and sum), computed without the loop on load.
TEST(Zoo, EmbeddingBagClassifierOpset17) { skip_without_torchvision(); check_zoo_model("bag", 17, 12, 3); }
TEST(Zoo, EmbeddingBagClassifierOpset11) { skip_without_torchvision(); check_zoo_model("bag", 11, 12, 3); }
TEST(Zoo, TextTransformerWithPaddingMaskOpset17) { skip_without_torchvision(); check_zoo_model("text", 17, 12, 3); }
TEST(Zoo, TextTransformerCausalPreNormOpset14) {
  skip_without_torchvision();
  check_zoo_model("text_causal", 14, 12, 3);
}
// The same exports with every module a model-local function (torch's export_modules_as_functions; exporters
// that keep the module structure write such models): inlined on load, they give the same answers.
TEST(Zoo, VisionTransformerModulesAsFunctionsOpset17) {
  skip_without_torchvision();
  check_zoo_model("vit", 17, 32, 2, /*functions=*/true);
}
TEST(Zoo, ShuffleNetV2ModulesAsFunctionsOpset15) {
  skip_without_torchvision();
  check_zoo_model("shufflenet", 15, 64, 2, /*functions=*/true);
}

// The zoo by hand: GRAPHRUN_ZOO="resnet18:17:64 mobilenet_v2:13:64 ..." (torchvision builder, opset,
// input size) prints one line per model with its worst errors relative to their tolerances.
TEST(Zoo, ModelsNamedInTheEnvironment) {
  const char* list = std::getenv("GRAPHRUN_ZOO");
  if (!list) GTEST_SKIP() << "set GRAPHRUN_ZOO to check more torchvision models";
  skip_without_torchvision();
  std::istringstream in(list);
  for (std::string entry; in >> entry;) {
    std::string name = entry.substr(0, entry.find(':'));
    int opset = 17, size = 64;
    std::sscanf(entry.c_str() + name.size(), ":%d:%d", &opset, &size);
    ZooResult r;
    try {
      r = check_zoo_model(name, opset, size);
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": " << e.what();
      std::printf("zoo %-22s opset %d size %3d: ERROR %s\n", name.c_str(), opset, size, e.what());
      std::fflush(stdout);
      continue;
    }
    if (!r.ran) {
      std::printf("zoo %-22s opset %d size %3d: ERROR the export failed\n", name.c_str(), opset, size);
      continue;
    }
    const bool ok = r.logits <= 1 && r.loss <= 1 && r.grads <= 1;
    std::printf("zoo %-22s opset %d size %3d: %s (worst/tolerance: logits %.2g, loss %.2g, gradients %.2g%s%s)\n",
                name.c_str(), opset, size, ok ? "match" : "MISMATCH", r.logits, r.loss, r.grads,
                r.worst_param.empty() ? "" : " at ", r.worst_param.c_str());
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace graphrun::testing
