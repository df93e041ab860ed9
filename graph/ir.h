// graphrun's graph IR: values by name (as in ONNX), nodes in topological order, initializers as parameters.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/tensor.h"

namespace graphrun {

// A dimension: a known size, a symbol such as "N", or unknown ("?").
struct Dim {
  int64_t size = -1;
  std::string param;
  Dim() = default;
  Dim(int64_t s) : size(s) {}  // NOLINT: implicit from a size is convenient in tests
  explicit Dim(std::string p) : param(std::move(p)) {}
  bool known() const { return size >= 0; }
  std::string str() const { return known() ? std::to_string(size) : (param.empty() ? "?" : param); }
  bool operator==(const Dim& o) const { return size == o.size && param == o.param; }
};

// The static type of a value: element type and (possibly partial) shape.
struct ValueInfo {
  DType dtype = DType::Undefined;
  bool has_shape = false;  // false: rank unknown
  std::vector<Dim> shape;
  std::string str() const;  // "f32[N,20,26,26]", "i64[?]", "f32" (unknown rank)
  bool fully_known() const;
  Shape concrete() const;  // throws unless fully_known()
};
// The dtype and (fully known) shape of a tensor.
ValueInfo value_info_of(const Tensor& t);

struct Attribute {
  enum class Kind { Undefined, Float, Int, String, Tensor, Floats, Ints, Strings };
  Kind kind = Kind::Undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  graphrun::Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  static Attribute Float(float v) { Attribute a; a.kind = Kind::Float; a.f = v; return a; }
  static Attribute Int(int64_t v) { Attribute a; a.kind = Kind::Int; a.i = v; return a; }
  static Attribute Str(std::string v) { Attribute a; a.kind = Kind::String; a.s = std::move(v); return a; }
  static Attribute Tens(graphrun::Tensor v) { Attribute a; a.kind = Kind::Tensor; a.t = std::move(v); return a; }
  static Attribute Floats(std::vector<float> v) { Attribute a; a.kind = Kind::Floats; a.floats = std::move(v); return a; }
  static Attribute Ints(std::vector<int64_t> v) { Attribute a; a.kind = Kind::Ints; a.ints = std::move(v); return a; }
  static Attribute Strs(std::vector<std::string> v) { Attribute a; a.kind = Kind::Strings; a.strings = std::move(v); return a; }
  std::string str() const;  // short form for printers: "3", "[1,1]", "\"NOTSET\"", "<f32[10]>"
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" is the default ONNX domain (ai.onnx)
  std::vector<std::string> inputs;   // "" marks an absent optional input
  std::vector<std::string> outputs;  // "" marks an unused optional output
  std::map<std::string, Attribute> attrs;

  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  bool has_output(size_t i) const { return i < outputs.size() && !outputs[i].empty(); }
  bool has_attr(const std::string& k) const { return attrs.count(k) != 0; }
  const Attribute* attr(const std::string& k) const;
  int64_t attr_i(const std::string& k, int64_t def) const;
  float attr_f(const std::string& k, float def) const;
  std::string attr_s(const std::string& k, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& k, std::vector<int64_t> def = {}) const;
  std::vector<float> attr_floats(const std::string& k, std::vector<float> def = {}) const;
  // "node 'conv1' (Conv)": how every error message names a node.
  std::string describe() const;
  // The key kernel and gradient tables use: "Conv", or "ai.graphrun::ConvGrad" for other domains.
  std::string op_key() const;
};

inline const char* kGraphrunDomain = "ai.graphrun";
inline const char* kTrainingDomain = "ai.onnx.preview.training";

// What an ONNX model file says of itself beyond its graph: read by load_onnx and written back by save_onnx
// as it came, so that a model graphrun saves (train --save, grad -o) keeps its author, version and notes.
struct ModelMeta {
  std::string doc;               // ModelProto.doc_string
  std::string domain;            // ModelProto.domain ("com.example")
  int64_t model_version = 0;     // ModelProto.model_version
  std::string producer_version;  // with Graph::producer_name
  std::vector<std::pair<std::string, std::string>> props;  // metadata_props, in the file's order
  // The graph's name in the file (an exporter's default such as "torch_jit") where load_onnx named the Graph
  // by its file instead (`shown_as`): save_onnx writes it back while Graph::name is still `shown_as`. A pass
  // that renames the graph (a replica's "net.cpu_0") writes its own name.
  std::string graph_name, shown_as;
  std::map<std::string, std::string> value_docs;  // the doc_string of inputs and outputs, by value name
};

// A graph input or output the model file declares as a sequence or an optional, in a graph loaded for one run on
// known inputs (load_onnx with `composite`, graphrun run): the tensor inputs or outputs that stand for it now.
struct CompositeSlot {
  std::string name;                // as the file declares it
  std::string type;                // "sequence", "optional" (of a tensor) or "optional(sequence)"
  int position = 0;                // among the file's graph inputs (outputs), initializers not counted
  bool none = false;               // an optional without a value
  std::vector<std::string> parts;  // its elements' graph inputs (outputs), in order; none for an empty sequence
};

struct Graph {
  std::string name = "graph";
  std::vector<Node> nodes;            // topological order
  std::vector<std::string> inputs;    // runtime inputs (initializers are not listed here)
  std::vector<std::string> outputs;
  std::map<std::string, Tensor> initializers;  // parameters and constants, by value name
  std::map<std::string, ValueInfo> values;     // static type of every value known
  std::map<std::string, int64_t> opsets;       // domain ("" = ai.onnx) -> version
  int64_t ir_version = 8;
  std::string producer_name = "graphrun";
  std::string doc;  // the graph's doc_string
  ModelMeta meta;
  // The model file kept its weights in external data files (ONNX's way past protobuf's 2 GiB):
  // save_onnx writes them that way too (it does past 1 GiB of weights regardless).
  bool external_data = false;
  // What a training step persists: (produced value, initializer) pairs, the value becoming the
  // initializer's state after each run (ONNX's TrainingInfoProto update_binding). The passes
  // add_optimizer and state_updates fill it; the executor takes it as ExecOptions::state_updates.
  // Not written to ONNX files.
  std::vector<std::pair<std::string, std::string>> state_updates;
  // The sequence and optional inputs and outputs of a graph loaded for one run (above); empty otherwise.
  std::vector<CompositeSlot> composite_inputs, composite_outputs;
  // Where a load expansion rewrote the graph (ONNX's Gradient nodes, autodiff/gradient_op.cc), the graph as it
  // was before (its initializers shared with this one's); null otherwise. The trainer saves it with the trained
  // weights, so that a saved model keeps its Gradient nodes rather than graphrun's expansion of them.
  std::shared_ptr<const Graph> as_written;

  int64_t opset(const std::string& domain = "") const;  // 0 when not imported
  const ValueInfo* info(const std::string& value) const;  // nullptr when unknown
  bool is_initializer(const std::string& v) const { return initializers.count(v) != 0; }
  bool is_input(const std::string& v) const;
  bool is_output(const std::string& v) const;
  // A fresh value/node name starting with `base` that no value, node or initializer uses yet.
  std::string unique_name(const std::string& base);
  // Index of the node producing `value`, or -1 (graph input, initializer, unknown).
  int producer(const std::string& value) const;
  // value name -> indices of the nodes reading it.
  std::unordered_map<std::string, std::vector<int>> consumers() const;
  // value name -> index of the node writing it (producer() for many values: one pass instead of one each).
  std::unordered_map<std::string, int> producers() const;
  // Reorders nodes topologically (stable, topological_order); throws Error naming a node on a cycle
  // or an undefined input.
  void topo_sort();
  // Appends a node; returns a reference valid until the next insertion.
  Node& add_node(Node n);

 private:
  std::unordered_map<std::string, int> name_counter_;
};

// Whether a BatchNormalization node normalises by the batch's statistics: its training_mode attribute from opset 14;
// before, whether it writes the running statistics (an output past the first).
bool batch_norm_training(const Node& n, int64_t opset);

// `s` on one line, for messages and the text printer: a newline shows as \n, other control characters
// (and DEL) as \xNN; everything else, UTF-8 included, as it is. Names in a model file can hold any bytes.
std::string printable(const std::string& s);

// The one topological sort (of Graph::topo_sort and of the ONNX loader's node lists): the stable
// order of n nodes, the lowest-index ready node first, where node i reads inputs(i) and writes
// outputs(i) and the values in `available` (graph inputs, initializers) need no producer. A value
// several nodes write counts as the last one's.
struct TopoOrder {
  std::vector<int> order;        // all n nodes, unless one of the problems below
  int undefined_node = -1;       // the first node reading a value nothing defines
  std::string undefined_input;   // ... and that value
  int cycle_node = -1;           // the first node on (or behind) a cycle
  bool already_sorted = false;   // every node comes after the producers of its inputs
};
TopoOrder topological_order(size_t n, const std::function<std::vector<std::string>(size_t)>& inputs,
                            const std::function<std::vector<std::string>(size_t)>& outputs,
                            const std::set<std::string>& available);

}  // namespace graphrun
