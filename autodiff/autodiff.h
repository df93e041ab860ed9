// Autodiff entry points: attach a loss to a forward graph, then build its backward graph as ordinary nodes.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::autodiff {

// CrossEntropy: softmax cross-entropy of an output's scores against int64 class ids. MSE: the mean squared error
// of an output against float targets of its shape. Output: the model computes its own loss (a module exported as
// forward(x, y) -> loss, a VAE's ELBO, a physics-informed net's residual): the loss is the mean of that output's
// elements, and no labels input is added.
enum class LossKind { CrossEntropy, MSE, Output };
// "cross-entropy", "mse", "output": the --loss flag's words.
const char* loss_kind_name(LossKind k);
// The kind a --loss word names; false for another word.
bool parse_loss_kind(const std::string& word, LossKind* k);

struct LossOptions {
  LossKind kind = LossKind::CrossEntropy;
  std::string output;             // which model output the loss reads; default the first
  std::string labels = "labels";  // name of the new input: int64 [N, d1..] for cross-entropy, float (output's shape)
                                  // for mse; none for Output
  std::string loss = "loss";      // name of the scalar loss output (mean over the batch)
  // Cross-entropy on scores [N, d1.., classes] with labels [N, d1..]: transposed to ONNX's
  // [N, classes, d1..] for SoftmaxCrossEntropyLoss (a language model's per-token loss).
  bool classes_last = false;
  // Cross-entropy only: torch.nn.CrossEntropyLoss(label_smoothing=eps), 0 <= eps < 1. Above 0 the loss is
  // (1 - eps) * NLL + eps * mean over positions of -(1/C) sum_c log_softmax_c: SoftmaxCrossEntropyLoss's
  // NLL `<loss>_nll`, the mean of its log_prob output over every position and class
  // `<loss>_smoothing_mean` (ReduceSum / Cast(Size)), two Muls by Constants and an Add (node
  // `<loss>_label_smoothing`) computing `loss`. 0: the SoftmaxCrossEntropyLoss node alone, as before.
  double label_smoothing = 0;
};

// Adds the loss node(s), the labels input and the scalar `loss` output. The model's outputs stay outputs. Output: one
// node, `loss` = Identity of a scalar output or ReduceMean (keepdims 0, every axis) of any other; no labels input.
Graph attach_loss(const Graph& forward, const LossOptions& opts = {});
passes::Pass attach_loss_pass(const LossOptions& opts);

struct BackwardOptions {
  std::string loss = "loss";
  std::set<std::string> freeze;        // initializers that get no gradient
  // Trainable parameters (minus `freeze`); when empty, trainable_params(graph, freeze).
  std::vector<std::string> params;
  std::string grad_suffix = "_grad";   // <param>_grad outputs
  // When set, the gradient of the loss is read from this new graph input (f32 scalar; f64 for an f64
  // loss) instead of being the constant 1: data-parallel replicas feed shard_size / global_batch so
  // that summing their gradients gives the gradient of the global batch mean.
  std::string loss_grad_input;
  // Training: a parameter the loss does not reach (a head whose output the loss does not read, a branch
  // behind a non-differentiable op) gets no <param>_grad output, so no allreduce and no update, and so
  // no weight decay or moments either: torch leaves a parameter whose .grad is None alone. Off (grad,
  // check): its gradient is an output of zeros.
  bool skip_unreached = false;
};

// Builds the backward graph: appends gradient nodes and one `<param>_grad` output per trainable
// parameter. Throws Error naming op and node when an op on the path has no gradient rule,
// and naming the parameters when a frozen name is unknown.
Graph backward(const Graph& with_loss, const BackwardOptions& opts = {});
passes::Pass backward_pass(const BackwardOptions& opts);

// The core of the backward builder, for the backward pass and ai.onnx.preview.training's Gradient op: appends to g
// the gradient nodes of `y` with respect to each root, walking only nodes between the roots and y (a value in `cut`
// is independent: nothing flows through the node that writes it). `seed` is the value holding dy (y's shape). Returns
// per root the values whose sum is its gradient (none: y does not depend on it). Throws Error listing every op on
// the way without a gradient rule. Nodes are appended unsorted (topo_sort after).
struct Differentiation {
  std::vector<std::string> roots;
  std::set<std::string> cut;
  std::string y, seed;
};
std::vector<std::vector<std::string>> differentiate(Graph& g, const Differentiation& d);

// The one rule for what is trained (grad, show and train all reach it through the backward pass):
// every initializer of a float type (f16, bf16, f32, f64), in name order, except
//   - BatchNormalization's running mean and variance (inputs 3 and 4: state the forward pass updates),
//   - Dropout's ratio and training_mode (inputs 1 and 2: settings), Clip's min and max (inputs 1 and 2: settings;
//     bounds computed from parameters get their gradient through the computation),
//   - f32/f64 tensors holding a NaN or an infinity (torch's buffers, e.g. a causal mask of -inf:
//     no step can train them),
//   - the initializers the model's metadata names under kFrozenMetadataKey (metadata_frozen),
//   - the names in `freeze` (each an initializer, or a module: a name that is not an initializer but
//     followed by '.' begins parameter names, as `fc1` for fc1.weight and fc1.bias, freezes all of
//     those; a name that is neither is an error listing the parameters).
// Integer and bool initializers (shapes, axes, masks) are constants. The optimizer trains f32 only
// (bucket_allreduce refuses another float parameter, naming it for --freeze).
std::vector<std::string> trainable_params(const Graph& g, const std::set<std::string>& freeze);
// The model's own list of initializers that are no parameters: metadata_props["graphrun.frozen"], names
// separated by commas or white space, each an initializer or a module (every initializer named module + "."
// something). torch exports its buffers (a positional encoding, a mask) and its requires_grad=False
// parameters as initializers like the weights; the exporting script can say which they are (README:
// "Exporting a PyTorch model to train"). A name the model has no initializer for is skipped: an export
// drops buffers it does not use or folds. The result is sorted and has each name once.
inline constexpr const char* kFrozenMetadataKey = "graphrun.frozen";
std::vector<std::string> metadata_frozen(const Graph& g);
// The names `freeze` stands for among `params` (a graph's parameters before freezing) and g's other
// initializers: each name itself, or a module's parameters (above); an Error for a name that is neither.
std::set<std::string> resolve_freeze(const std::vector<std::string>& params, const Graph& g,
                                     const std::set<std::string>& freeze);

// ScatterElements, Scatter and ScatterND without a reduction: how many updates (elements; ScatterND's
// index tuples) a later update to the same target overwrites (they apply in index order, on every device),
// for constant `indices` and the data's dims `data` (-1 unknown: only a negative index needs its dim);
// -1 when it cannot be told (or is not worth telling: over 2^20 indices). (autodiff/rules/indexing.cc)
int64_t overwritten_scatter_updates(const Node& n, const Tensor& indices, const Shape& data);
// One note per such node of g whose constant indices collide: ONNX leaves the result undefined, graphrun
// lets the last update win, PyTorch (whose scatter_add below opset 16 and index_put with accumulate=True
// export this way) adds them. `graphrun check` and `train` print them.
std::vector<std::string> colliding_scatter_notes(const Graph& g);

}  // namespace graphrun::autodiff
