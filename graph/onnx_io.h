// ONNX model files <-> graphrun Graph. The only place (with tensor_io) that touches ONNX protobuf.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/tensor_io.h"

namespace graphrun {

// Loads, validates (onnx::checker), infers shapes (onnx::shape_inference, plus graphrun's own where
// it falls short) and converts a model. Weights in external data files (ONNX's external data, found
// relative to the model's folder, never outside it) are read in; the Graph remembers that they were.
// Opsets below 7 are converted up (onnx's version converter), 18 to 22 rewritten down to 17, node by
// node; model-local functions are inlined. Errors name the file: missing, truncated, not ONNX, opset above 22 or a node of 18+ that 17
// cannot express, unsupported features (subgraphs), external data missing or shorter than its tensors.
// A graph named as exporters name every graph ("torch_jit", "torch-jit-export", "main_graph", or none)
// takes its file's name (net.onnx: 'net') for messages; Graph::meta keeps the file's name for save_onnx,
// with what else the model says of itself (metadata_props, doc_string, model_version, domain, ...).
Graph load_onnx(const std::string& path);
// What one run's inputs tell the loader (graphrun run, the conformance runner).
struct KnownInputs {
  // Small integer and bool inputs (small_control_value): an If's condition, a Loop's trip count or condition that
  // they decide is decided by these values, the control flow taken or unrolled for them.
  std::map<std::string, Tensor> small;
  // The sequence and optional inputs. Each becomes the tensor inputs of its elements, NAME[0], NAME[1], ...
  // (Graph::composite_inputs), and the sequence and optional ops follow the lists known now
  // (passes/resolve_static_sequences.h). An optional input missing here holds no value. The graph's sequence and
  // optional outputs become the tensor outputs of their elements (Graph::composite_outputs).
  std::map<std::string, CompositeValue> composite;
  // Every tensor input of the run, and a way to run a graph on the CPU (graphrun run's executor: fetch its outputs
  // for these feeds). Where both are given, an If's condition, a Loop's trip count or condition that the data decide
  // (computed from the inputs outside any loop body, by no random op) is computed by running the part of the model
  // before it, and the control flow is taken or unrolled for that value. The tensors' shapes stand for the symbolic
  // dimensions their inputs declare (a SplitToSequence's count of parts follows).
  std::map<std::string, Tensor> tensors;
  std::function<std::map<std::string, Tensor>(Graph, const std::map<std::string, Tensor>&)> compute;
};
// load_onnx for one run on known inputs (graphrun run). The graph holds for those values alone.
Graph load_onnx(const std::string& path, const KnownInputs& known);
// load_onnx for the commands that train it (train, grad, plan, show's training views): where the model holds
// Gradient nodes (ai.onnx.preview.training), they differentiate the form training runs, as torch's model.train()
// does: the model is first brought to opset 15 if below 13 and to its training form (passes/train_mode.h:
// BatchNormalization on batch statistics, Dropout drawing masks). Initializers the exporter merged by value
// (Identity nodes of initializers: torch's eval-mode export) are separate again (passes/untie_initializers.h).
// Otherwise the model loads as load_onnx loads it.
Graph load_onnx_for_training(const std::string& path);
// Whether `t` can stand for a graph input in KnownInputs::small: an integer or bool tensor of at most 64 elements.
bool small_control_value(const Tensor& t);
// A graph input that is not an initializer, as the file declares it (nothing checked): `composite` is "" for a
// tensor, else "sequence", "optional" (of a tensor) or "optional(sequence)", and "unsupported" for a sequence or
// optional of other values (maps, sequences of sequences).
struct DeclaredInput {
  std::string name;
  std::string composite;
  ValueInfo info;  // a tensor input's declared type and shape
};
std::vector<DeclaredInput> onnx_inputs(const std::string& path);
std::vector<DeclaredInput> onnx_inputs_of_bytes(const std::string& bytes, const std::string& what);
// Whether load_onnx expands an ai.onnx op at `opset` into the ops its schema defines it by (the op has no
// CPU kernel and a function body in its schema: MeanVarianceNormalization, HannWindow, ...).
bool expands_on_load(const std::string& op_type, int64_t opset);
// Same, from serialized bytes; `what` names the source in errors. External data is refused (no folder).
Graph load_onnx_bytes(const std::string& bytes, const std::string& what);
Graph load_onnx_bytes(const std::string& bytes, const std::string& what, const KnownInputs& known);

// A load-time expansion from a layer above graph/ (autodiff expands ai.onnx.preview.training's Gradient nodes into the
// nodes that compute them: autodiff/gradient_op.cc). load_onnx runs every registered expansion on each graph it
// returns, in registration order; `what` names the model in errors, `training` says that the graph is loaded for
// training (load_onnx_for_training). One that rewrites the graph keeps it as it was in Graph::as_written. Register at
// static initialisation.
using LoadExpansion = void (*)(Graph& g, const std::string& what, bool training);
bool register_load_expansion(LoadExpansion fn);

// Writes the graph as an ONNX model (opset imports for every domain used, ai.graphrun included).
// With check, runs onnx::checker on the result first (full check) and refuses an invalid model.
// A graph loaded with external data, or with over 1 GiB of weights, is written with its initializers
// of 1 KiB or more in PATH.data beside it (one file, offsets aligned to 4 KiB).
// Each file is written whole or not at all (graph/atomic_file.h: a temporary file beside it, fsynced,
// renamed over it): a failed write leaves PATH (and PATH.data) as they were and is one line,
// "PATH: cannot write: No space left on device".
void save_onnx(const Graph& g, const std::string& path, bool check = true);
std::string onnx_bytes(const Graph& g);

// The model brought up to opset `to` by onnx's version converter, for training: its passes, gradient
// rules and loss read the forms of opset 13 on (Clip's bounds, Dropout's ratio, the pads of Pad, the
// starts of Slice, the axes of Unsqueeze as inputs; Softmax over one axis), where an older node states
// them as attributes. A BatchNormalization with opset 9's training outputs becomes one in training mode
// (its unread saved mean and variance dropped). Says so once per model on stderr. A graph at opset `to`
// or above comes back unchanged; one the converter cannot convert is an Error naming the model.
Graph convert_opset(const Graph& g, int64_t to);

// Fills g.values for every value whose type onnx shape inference (with graphrun's op schemas)
// can determine; keeps what is already known.
void infer_shapes(Graph& g);
// Infers every value's type again from the inputs and initializers, forgetting what the graph said of
// the others (after a pass changed what they follow from: a batch made symbolic, pads folded); where
// inference fails the graph keeps what it had. Returns whether it re-inferred.
bool reinfer_shapes(Graph& g);

}  // namespace graphrun
