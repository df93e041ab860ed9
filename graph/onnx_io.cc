// ONNX ModelProto <-> graphrun Graph: reading (validate, infer shapes, convert) and writing (build, check).
#include "graph/onnx_io.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>
#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <iterator>
#include <limits>
#include <optional>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <sstream>
#include <sys/stat.h>

#include "graph/atomic_file.h"
#include "graph/graphrun_schemas.h"
#include "graph/onnx_tensor.h"
#include "graph/op_table.h"
#include "graph/opset_lowering.h"
#include "graph/passes/fill_reshape_dims.h"
#include "graph/passes/fill_old_negative_axes.h"
#include "graph/passes/fill_resize_ranks.h"
#include "graph/passes/fill_slice_ranks.h"
#include "graph/passes/inline_static_ifs.h"
#include "graph/passes/resolve_static_sequences.h"
#include "graph/passes/unroll_static_loops.h"
#include "graph/passes/untie_initializers.h"
#include "graph/passes/vectorize_bag_loops.h"
#include "graph/passes/shape_values.h"
#include "graph/validate.h"

namespace graphrun {

namespace {

constexpr int64_t kMinOpset = 7;  // older opsets are converted on load (kMaxOpset: graph/opset_lowering.h)
constexpr int64_t kMaxIrVersion = 8;  // what ONNX 1.12's checker accepts

// ONNX errors come with multi-line context (a dump of the node); users get the first line.
std::string first_line(const std::string& s) {
  std::string r = s.substr(0, s.find('\n'));
  while (!r.empty() && (r.back() == ' ' || r.back() == '\r' || r.back() == ':')) r.pop_back();
  return r.empty() ? s : r;
}

// ONNX wants nodes in topological order, but not every writer obeys; sort (stably) before checking,
// and name the node whose input comes from nowhere.
void sort_nodes(onnx::GraphProto* gp, const std::string& what) {
  std::set<std::string> available;
  for (const auto& v : gp->input()) available.insert(v.name());
  for (const auto& t : gp->initializer()) available.insert(t.name());
  auto strings = [](const auto& field) { return std::vector<std::string>(field.begin(), field.end()); };
  const TopoOrder t = topological_order(
      gp->node_size(), [&](size_t i) { return strings(gp->node(i).input()); },
      [&](size_t i) { return strings(gp->node(i).output()); }, available);
  if (t.undefined_node >= 0)
    GR_FAIL(what << ": " << proto_node_desc(gp->node(t.undefined_node), t.undefined_node) << ": input '"
                 << t.undefined_input << "' is not produced by any node, graph input or initializer");
  if (t.cycle_node >= 0)
    GR_FAIL(what << ": the graph has a cycle through " << proto_node_desc(gp->node(t.cycle_node), t.cycle_node));
  if (t.already_sorted) return;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i : t.order) *nodes.Add() = gp->node(i);
  gp->mutable_node()->Swap(&nodes);
}

// ---- reading ----

ValueInfo value_info_from_type(const onnx::TypeProto& type) {
  ValueInfo vi;
  if (type.value_case() != onnx::TypeProto::kTensorType) return vi;  // sequences, maps: type unknown
  const auto& tt = type.tensor_type();
  vi.dtype = static_cast<DType>(tt.elem_type());
  if (tt.has_shape()) {
    vi.has_shape = true;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value() && d.dim_value() >= 0) vi.shape.emplace_back(d.dim_value());
      else if (d.has_dim_param() && !d.dim_param().empty()) vi.shape.emplace_back(d.dim_param());
      else vi.shape.emplace_back();
    }
  }
  return vi;
}

// Combines what was known with what inference found: known facts are kept, gaps filled.
ValueInfo merge_info(const ValueInfo& known, const ValueInfo& found) {
  ValueInfo r = known;
  if (r.dtype == DType::Undefined) r.dtype = found.dtype;
  if (!r.has_shape) {
    r.has_shape = found.has_shape;
    r.shape = found.shape;
  } else if (found.has_shape && found.shape.size() == r.shape.size()) {
    for (size_t i = 0; i < r.shape.size(); ++i)
      if (!r.shape[i].known() && (found.shape[i].known() || r.shape[i].param.empty())) r.shape[i] = found.shape[i];
  }
  return r;
}

Attribute attribute_from_proto(const onnx::AttributeProto& a, const Node& n, const std::string& what) {
  using AP = onnx::AttributeProto;
  const std::string ctx = what + ": " + n.describe() + ": attribute '" + a.name() + "'";
  switch (a.type()) {
    case AP::FLOAT: return Attribute::Float(a.f());
    case AP::INT: return Attribute::Int(a.i());
    case AP::STRING: return Attribute::Str(a.s());
    case AP::TENSOR: return Attribute::Tens(tensor_from_proto(a.t(), ctx));
    case AP::FLOATS: return Attribute::Floats({a.floats().begin(), a.floats().end()});
    case AP::INTS: return Attribute::Ints({a.ints().begin(), a.ints().end()});
    case AP::STRINGS: return Attribute::Strs({a.strings().begin(), a.strings().end()});
    case AP::GRAPH:
    case AP::GRAPHS:
      GR_FAIL(what << ": " << n.describe() << " has a subgraph (attribute '" << a.name()
                   << "'); control flow (If, Loop, Scan) is not supported");
    case AP::UNDEFINED:
      // Old exporters leave `type` unset; infer it from the field that is filled.
      if (a.has_f()) return Attribute::Float(a.f());
      if (a.has_i()) return Attribute::Int(a.i());
      if (a.has_s()) return Attribute::Str(a.s());
      if (a.has_t()) return Attribute::Tens(tensor_from_proto(a.t(), ctx));
      if (a.floats_size()) return Attribute::Floats({a.floats().begin(), a.floats().end()});
      if (a.ints_size()) return Attribute::Ints({a.ints().begin(), a.ints().end()});
      if (a.strings_size()) return Attribute::Strs({a.strings().begin(), a.strings().end()});
      if (a.has_g() || a.graphs_size())
        GR_FAIL(what << ": " << n.describe() << " has a subgraph (attribute '" << a.name()
                     << "'); control flow (If, Loop, Scan) is not supported");
      GR_FAIL(ctx << " has no value");
    default:
      GR_FAIL(ctx << " is of kind " << AP::AttributeType_Name(a.type()) << ", which graphrun does not support");
  }
}

// The folder of a model file: where its external data files are found.
std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// A non-negative decimal integer of an external_data entry, or -1.
int64_t parse_count(const std::string& s) {
  if (s.empty() || s.size() > 18) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Reads an initializer stored as external data (ONNX's external data: entries location, offset, length,
// relative to the model's folder) straight into a tensor. The file is untrusted like the model: a location
// must stay inside the model's folder (relative, no '..'), name a regular file, and hold offset + the bytes
// the shape promises before anything is allocated; length, when given, must be those bytes. `dir` empty:
// the model came as bytes, without a folder to look in.
Tensor read_external(const onnx::TensorProto& t, const std::string& ctx, const std::string& dir) {
  GR_CHECK(!dir.empty(), ctx << ": a model read from memory has no folder to find its data in; load it from its file");
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& e : t.external_data()) {
    if (e.key() == "location") location = e.value();
    else if (e.key() == "offset" || e.key() == "length") {
      const int64_t v = parse_count(e.value());
      GR_CHECK(v >= 0, ctx << ": " << e.key() << " '" << e.value() << "' is not a byte count");
      (e.key() == "offset" ? offset : length) = v;
    }
  }
  GR_CHECK(!location.empty(), ctx << ": no location");
  GR_CHECK(location[0] != '/' && location.find('\\') == std::string::npos,
           ctx << ": location '" << location << "' is not a path relative to the model's folder");
  for (size_t b = 0; b <= location.size();) {
    const size_t e = std::min(location.find('/', b), location.size());
    GR_CHECK(location.compare(b, e - b, "..") != 0, ctx << ": location '" << location << "' leaves the model's folder");
    b = e + 1;
  }
  GR_CHECK(!t.has_raw_data() && !t.float_data_size() && !t.int32_data_size() && !t.int64_data_size() &&
               !t.double_data_size() && !t.uint64_data_size(),
           ctx << ": holds data inside the model as well");
  const ProtoLayout layout = proto_layout(t, ctx);
  const auto bytes = static_cast<int64_t>(layout.bytes);
  GR_CHECK(length < 0 || length == bytes, ctx << ": length " << length << " bytes, but " << dtype_name(layout.dtype)
                                              << shape_str(layout.shape) << " needs " << bytes);
  const std::string file = dir + "/" + location;
  struct stat st;
  GR_CHECK(stat(file.c_str(), &st) == 0, ctx << ": " << file << ": no such file");
  GR_CHECK(S_ISREG(st.st_mode), ctx << ": " << file << " is not a regular file");
  GR_CHECK(offset <= st.st_size && bytes <= st.st_size - offset,
           ctx << ": " << file << " holds " << st.st_size << " bytes, too few for " << bytes << " at offset " << offset);
  Tensor v(layout.dtype, layout.shape);
  std::ifstream f(file, std::ios::binary);
  GR_CHECK(f, ctx << ": " << file << ": cannot open for reading");
  f.seekg(offset);
  f.read(static_cast<char*>(v.raw()), static_cast<std::streamsize>(bytes));
  GR_CHECK(f && f.gcount() == bytes, ctx << ": " << file << ": read error");
  return v;
}

// Floating-point initializers of more than this many bytes travel beside the ModelProto, as tensors, while
// onnx's checker and inference look at the model; the graph gets a typed input in the place of each (no check
// or inference reads the values of large float tensors: those read are shapes, axes and indices, integers,
// which stay). So the copies of the model that checking and inference make stay small, and the weights are
// held once, not twice or three times.
constexpr size_t kDetachBytes = 4096;
bool detachable(int32_t data_type) {
  using TP = onnx::TensorProto;
  return data_type == TP::FLOAT || data_type == TP::DOUBLE || data_type == TP::FLOAT16 || data_type == TP::BFLOAT16;
}

struct Weights {
  std::map<std::string, Tensor> tensors;  // by initializer name
  bool external = false;                  // some came from external data files
};

// The typed graph input that stands for a detached initializer while the model is checked.
void add_placeholder_input(onnx::GraphProto& g, const std::string& name, DType dt, const Shape& shape) {
  auto* v = g.add_input();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(dt));
  auto* sp = tt->mutable_shape();  // a scalar has a shape too: rank 0
  for (int64_t d : shape) sp->add_dim()->set_dim_value(d);
}

// Takes every external initializer (read from its file) and every detachable one over kDetachBytes out of `m`,
// freeing each one's bytes in the model as soon as its tensor holds them.
Weights detach_initializers(onnx::ModelProto& m, const std::string& what, const std::string& dir) {
  Weights w;
  auto* gp = m.mutable_graph();
  std::set<std::string> inputs, names;
  for (const auto& v : gp->input()) inputs.insert(v.name());
  for (const auto& t : gp->initializer())
    GR_CHECK(names.insert(t.name()).second, what << ": initializer '" << t.name() << "' is defined twice");
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (auto& t : *gp->mutable_initializer()) {
    const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
    if (!external && (!detachable(t.data_type()) || t.ByteSizeLong() <= kDetachBytes)) {
      kept.Add()->Swap(&t);
      continue;
    }
    GR_CHECK(!t.name().empty(), what << ": an initializer has no name");
    const std::string ctx = what + ": initializer '" + t.name() + "'" + (external ? " (external data)" : "");
    Tensor v = external ? read_external(t, ctx, dir) : tensor_from_proto(t, ctx);
    w.external |= external;
    if (!detachable(t.data_type())) {  // integers stay in the model, where checks and inference read them
      const std::string name = t.name();  // tensor_to_proto clears the proto it writes
      tensor_to_proto(v, name, &t);
      kept.Add()->Swap(&t);
      continue;
    }
    if (!inputs.count(t.name())) add_placeholder_input(*gp, t.name(), v.dtype(), v.shape());
    w.tensors.emplace(t.name(), std::move(v));
    onnx::TensorProto().Swap(&t);  // frees the bytes now rather than with the model
  }
  gp->mutable_initializer()->Swap(&kept);
  return w;
}

// ---- model-local functions, inlined ----
//
// Exporters that keep a model's module structure (torch's dynamo exporter, onnxscript) write each module
// as a FunctionProto and call it as a node of the function's domain. graphrun inlines every call on load:
// the body's nodes with the function's inputs and outputs bound to the call's, its inner values renamed
// under the call's name, and attribute references (ref_attr_name) given the call's attribute, else the
// function's default, else left out. Calls inside bodies are inlined in turn. A hostile file cannot make this
// loop or grow without bound: a function that calls itself is refused, and so is a model whose inlined
// node count (counted before anything is copied) exceeds kMaxInlinedNodes.
constexpr int64_t kMaxInlinedNodes = 1 << 18;
constexpr int kMaxFunctionDepth = 64;  // calls within calls (the inliner recurses once per level)

// A function's attribute defaults (FunctionProto.attribute_proto, field 11, IR 9): newer than the onnx 1.12
// protobuf graphrun builds with, so read from the message's unknown fields. An attribute the call does not give
// takes its default (onnxscript's functions rely on them).
std::map<std::string, onnx::AttributeProto> attribute_defaults(const onnx::FunctionProto& f, const std::string& what) {
  constexpr int kAttributeProtoField = 11;
  std::map<std::string, onnx::AttributeProto> defaults;
  const auto& unknown = f.GetReflection()->GetUnknownFields(f);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const auto& field = unknown.field(i);
    if (field.number() != kAttributeProtoField) continue;
    onnx::AttributeProto a;
    GR_CHECK(field.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED &&
                 a.ParseFromString(field.length_delimited()) && !a.name().empty(),
             what << ": function " << f.name() << ": an attribute default does not parse");
    defaults[a.name()] = a;
  }
  return defaults;
}

// IR 10's overloads: a function is known by (domain, name, overload), FunctionProto.overload being field 13,
// and a call names the overload it means in NodeProto.overload, field 8. Both are newer than onnx 1.12's protobuf:
// read from the unknown fields, "" where absent (the one overload every older model has).
std::string overload_of(const google::protobuf::Message& m, int field_number, const std::string& what) {
  std::string overload;
  const auto& unknown = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const auto& field = unknown.field(i);
    if (field.number() != field_number) continue;
    GR_CHECK(field.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED,
             what << ": an overload name (field " << field_number << ") is not a string");
    overload = field.length_delimited();  // the last occurrence wins, as protobuf's own parser does
  }
  return overload;
}
constexpr int kNodeOverloadField = 8, kFunctionOverloadField = 13;

struct Inliner {
  using Key = std::tuple<std::string, std::string, std::string>;  // (domain, name, overload)
  std::map<Key, const onnx::FunctionProto*> functions;
  std::map<const onnx::FunctionProto*, std::map<std::string, onnx::AttributeProto>> defaults;
  const std::string& what;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
  int64_t calls = 0;

  const onnx::FunctionProto* function_of(const onnx::NodeProto& n) const {
    if (functions.empty()) return nullptr;
    const std::string overload = overload_of(n, kNodeOverloadField, what);
    auto it = functions.find({normal_domain(n.domain()), n.op_type(), overload});
    if (it != functions.end()) return it->second;
    // A call of an overload the model does not define is not an op of any opset either.
    GR_CHECK(overload.empty(), what << ": node '" << n.name() << "' calls overload '" << overload << "' of "
                                    << n.op_type() << ", which the model's functions do not define");
    return nullptr;
  }

  // The nodes a call of `f` inlines to, capped at kMaxInlinedNodes + 1; refuses a function that calls itself.
  std::map<const onnx::FunctionProto*, int64_t> sizes;
  std::set<const onnx::FunctionProto*> open;
  int64_t size_of(const onnx::FunctionProto* f, int depth = 1) {
    if (auto it = sizes.find(f); it != sizes.end()) return it->second;
    GR_CHECK(open.insert(f).second, what << ": function " << f->name() << " calls itself");
    GR_CHECK(depth <= kMaxFunctionDepth, what << ": function calls nest over " << kMaxFunctionDepth << " deep (at "
                                              << f->name() << ")");
    int64_t n = 0;
    for (const auto& body : f->node()) {
      const onnx::FunctionProto* g = function_of(body);
      n = std::min(n + (g ? size_of(g, depth + 1) : 1), kMaxInlinedNodes + 1);
    }
    open.erase(f);
    return sizes[f] = n;
  }

  void check_size(const onnx::GraphProto& g) {
    int64_t n = 0;
    for (const auto& node : g.node()) {
      const onnx::FunctionProto* f = function_of(node);
      n = std::min(n + (f ? size_of(f) : 1), kMaxInlinedNodes + 1);
    }
    GR_CHECK(n <= kMaxInlinedNodes, what << ": inlining the model's functions would make over " << kMaxInlinedNodes
                                         << " nodes");
  }

  void emit(const onnx::NodeProto& n) {
    const onnx::FunctionProto* f = function_of(n);
    if (!f) {
      *out.Add() = n;
      return;
    }
    const std::string call = "'" + n.name() + "' (" + f->name() + ")";
    GR_CHECK(n.input_size() <= f->input_size() && n.output_size() <= f->output_size(),
             what << ": function call " << call << " has " << n.input_size() << " inputs and " << n.output_size()
                  << " outputs; the function takes " << f->input_size() << " and gives " << f->output_size());
    const std::string prefix = (n.name().empty() ? f->name() : n.name()) + "/" + std::to_string(calls++) + "/";
    std::map<std::string, std::string> rename;  // the body's value names -> the graph's
    for (int i = 0; i < f->input_size(); ++i) rename[f->input(i)] = i < n.input_size() ? n.input(i) : "";
    for (int i = 0; i < f->output_size(); ++i)
      rename[f->output(i)] = i < n.output_size() && !n.output(i).empty() ? n.output(i) : prefix + f->output(i);
    std::map<std::string, const onnx::AttributeProto*> given;
    for (const auto& [name, a] : defaults[f]) given[name] = &a;
    for (const auto& a : n.attribute()) given[a.name()] = &a;
    for (const auto& body : f->node()) {
      onnx::NodeProto b = body;
      for (auto& v : *b.mutable_input()) {
        if (v.empty()) continue;
        auto it = rename.find(v);
        GR_CHECK(it != rename.end(), what << ": function " << f->name() << " reads '" << v
                                          << "', which none of its inputs or nodes defines");
        v = it->second;
      }
      for (auto& v : *b.mutable_output()) {
        if (v.empty()) continue;
        if (!rename.count(v)) rename[v] = prefix + v;
        v = rename[v];
      }
      b.set_name(prefix + body.name());
      google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
      for (const auto& a : body.attribute()) {
        if (a.ref_attr_name().empty()) {
          *attrs.Add() = a;
        } else if (auto it = given.find(a.ref_attr_name()); it != given.end()) {
          onnx::AttributeProto* r = attrs.Add();
          *r = *it->second;
          r->set_name(a.name());
        }  // an attribute the call does not give, without a default, is absent in the body
      }
      b.mutable_attribute()->Swap(&attrs);
      emit(b);
    }
  }
};

}  // namespace

namespace {
// Whether every op of the function body has a CPU kernel or expands in turn (`depth` bounds the recursion).
bool body_runs(const onnx::FunctionProto& f, int64_t opset, int depth);

bool expands(const std::string& op_type, int64_t opset, int depth) {
  if (const OpFacts* f = op_table().find(op_type); f && f->kernel(Device::Kind::CPU)) return false;
  const auto* schema = onnx::OpSchemaRegistry::Schema(op_type, static_cast<int>(opset), "");
  return depth < 8 && schema && schema->HasFunction() && schema->GetFunction() &&
         body_runs(*schema->GetFunction(), opset, depth + 1);
}

bool body_runs(const onnx::FunctionProto& f, int64_t opset, int depth) {
  for (const auto& n : f.node()) {
    if (!normal_domain(n.domain()).empty()) return false;
    const OpFacts* k = op_table().find(n.op_type());
    if (!(k && k->kernel(Device::Kind::CPU)) && !expands(n.op_type(), opset, depth)) return false;
  }
  return true;
}
}  // namespace

bool expands_on_load(const std::string& op_type, int64_t opset) { return expands(op_type, opset, 0); }

namespace {

// ONNX ops that the spec defines as a function of other ops (MeanVarianceNormalization, the Hann, Hamming
// and Blackman windows) and that have no graphrun kernel are inlined like a model's functions, from the
// body in the op's schema at the model's opset: they run, and differentiate, as the ops the spec writes them
// with. The bodies outlive the inlining in `storage`.
void add_schema_functions(const onnx::ModelProto& m, Inliner& in, std::deque<onnx::FunctionProto>& storage) {
  int64_t opset = 0;
  for (const auto& op : m.opset_import())
    if (normal_domain(op.domain()).empty()) opset = op.version();
  if (opset == 0) return;
  auto consider = [&](const onnx::NodeProto& n) {
    if (!normal_domain(n.domain()).empty()) return;
    const Inliner::Key key{"", n.op_type(), ""};
    if (in.functions.count(key)) return;
    if (!expands_on_load(n.op_type(), opset)) return;
    const auto* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset), "");
    storage.push_back(*schema->GetFunction());
    const onnx::FunctionProto* f = &storage.back();
    in.functions[key] = f;
    for (const auto& [name, attr] : schema->attributes())
      if (attr.default_value.type() != onnx::AttributeProto::UNDEFINED) {
        onnx::AttributeProto a = attr.default_value;
        a.set_name(name);
        in.defaults[f][name] = a;
      }
  };
  for (const auto& n : m.graph().node()) consider(n);
  for (const auto& f : m.functions())
    for (const auto& n : f.node()) consider(n);
}

void inline_functions(onnx::ModelProto& m, const std::string& what) {
  Inliner in{{}, {}, what, {}, 0, {}, {}};
  std::deque<onnx::FunctionProto> schema_bodies;
  add_schema_functions(m, in, schema_bodies);
  if (m.functions_size() == 0 && in.functions.empty()) return;
  std::map<std::string, int64_t> model_opsets;
  for (const auto& op : m.opset_import()) model_opsets[normal_domain(op.domain())] = op.version();
  for (const auto& f : m.functions()) {
    const std::string overload = overload_of(f, kFunctionOverloadField, what);
    GR_CHECK(in.functions.emplace(Inliner::Key{normal_domain(f.domain()), f.name(), overload}, &f).second,
             what << ": function " << f.name() << " of domain '" << f.domain() << "'"
                  << (overload.empty() ? "" : " overload '" + overload + "'") << " is defined twice");
    in.defaults[&f] = attribute_defaults(f, what);
    for (const auto& op : f.opset_import()) {
      auto it = model_opsets.find(normal_domain(op.domain()));
      GR_CHECK(it == model_opsets.end() || it->second == op.version(),
               what << ": function " << f.name() << " imports opset " << op.version() << " of domain '"
                    << op.domain() << "', the model " << (it == model_opsets.end() ? 0 : it->second)
                    << "; graphrun reads one opset per domain");
      if (it == model_opsets.end()) {
        model_opsets[normal_domain(op.domain())] = op.version();
        *m.add_opset_import() = op;
      }
    }
  }
  in.check_size(m.graph());
  for (const auto& n : m.graph().node()) in.emit(n);
  m.mutable_graph()->mutable_node()->Swap(&in.out);
  // The functions' own domains are gone with the calls.
  std::set<std::string> used;
  for (const auto& n : m.graph().node()) used.insert(normal_domain(n.domain()));
  std::set<std::string> function_domains;
  for (const auto& f : m.functions()) function_domains.insert(normal_domain(f.domain()));
  google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto> kept;
  for (const auto& op : m.opset_import())
    if (!function_domains.count(normal_domain(op.domain())) || used.count(normal_domain(op.domain())))
      *kept.Add() = op;
  m.mutable_opset_import()->Swap(&kept);
  m.clear_functions();
}

// Refuses what graphrun cannot represent.
void check_supported_features(const onnx::ModelProto& m, const std::string& what) {
  const auto& g = m.graph();
  if (g.sparse_initializer_size())
    GR_FAIL(what << ": sparse initializer '" << g.sparse_initializer(0).values().name() << "' is not supported");
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& np = g.node(i);
    for (const auto& a : np.attribute())
      if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS || a.has_g() ||
          a.graphs_size()) {
        // inline_static_ifs took every If whose condition the model's shapes and constants decide.
        if (np.op_type() == "If")
          GR_FAIL(what << ": " << proto_node_desc(np, i) << ": its condition '" << (np.input_size() ? np.input(0) : "")
                       << "' depends on the input data; graphrun takes an If only where the condition is known "
                          "when the model loads (graphrun run also takes it from a small integer or bool input of "
                          "the declared type and shape)");
        // unroll_static_loops took every Loop and Scan whose count the model's shapes and constants decide.
        if (np.op_type() == "Loop")
          GR_FAIL(what << ": " << proto_node_desc(np, i)
                       << ": its trip count or its condition depends on the input data; graphrun runs a Loop by "
                          "unrolling it when the model loads, where both are known then (graphrun run also takes "
                          "them from small integer or bool inputs of the declared type and shape)");
        if (np.op_type() == "Scan")
          GR_FAIL(what << ": " << proto_node_desc(np, i)
                       << ": the length of its sequence is not known when the model loads; graphrun runs a Scan by "
                          "unrolling it then");
        if (sequence_or_optional_op(np))
          GR_FAIL(what << ": " << proto_node_desc(np, i) << ": " << kSequenceRefusal << " here "
                       << kSequenceRefusalWhy);
        GR_FAIL(what << ": " << proto_node_desc(np, i) << " has a subgraph (attribute '" << a.name()
                     << "'); graphrun takes control flow only as If, Loop and Scan it can resolve when loading");
      }
  }
}

void check_opsets(const onnx::ModelProto& m, const std::string& what) {
  bool has_default = false;
  for (const auto& op : m.opset_import()) {
    if (!normal_domain(op.domain()).empty()) continue;
    has_default = true;
    if (op.version() < 1 || op.version() > kMaxLoweredOpset)
      GR_FAIL(what << ": ONNX opset " << op.version() << " is not supported (graphrun reads opsets 1 to "
                   << kMaxLoweredOpset << "; below " << kMinOpset << " and above " << kMaxOpset
                   << " it converts on load)");
  }
  // A model of only custom-domain ops needs no default opset, but most do.
  if (!has_default && m.opset_import_size() == 0)
    GR_FAIL(what << ": not a valid ONNX model: no opset_import");
}

// What onnx 1.12's version converter writes that its own checker lets pass but the spec does not: its
// Reshape 4 -> 5 adapter makes the shape attribute a Constant whose tensor has no dims but several values.
// Such a Constant gets the one dimension its values make.
void mend_converted(onnx::ModelProto& m) {
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() != "Constant" || !normal_domain(n.domain()).empty()) continue;
    for (auto& a : *n.mutable_attribute()) {
      if (a.name() != "value" || !a.has_t() || a.t().dims_size() != 0 || a.t().has_raw_data()) continue;
      const int count = std::max({a.t().int64_data_size(), a.t().float_data_size(), a.t().int32_data_size(),
                                  a.t().double_data_size()});
      if (count > 1) a.mutable_t()->add_dims(count);
    }
  }
}

// What onnx 1.12's version converter needs that the spec leaves optional: its Pad 10 -> 11 adapter
// reads the `value` attribute unchecked (torch's opset-9 export of F.pad and of LocalResponseNorm
// writes a Pad without it); below opset 11 the default, 0, is written out before converting.
void mend_for_converter(onnx::ModelProto& m) {
  for (const auto& op : m.opset_import())
    if (normal_domain(op.domain()).empty() && op.version() >= 11) return;  // (Pad-11 has no `value`)
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() != "Pad" || !normal_domain(n.domain()).empty()) continue;
    bool has_value = false, constant = true;  // (the adapter leaves `value` an attribute in the other modes)
    for (const auto& a : n.attribute()) {
      has_value = has_value || a.name() == "value";
      if (a.name() == "mode") constant = a.s() == "constant";
    }
    if (has_value || !constant) continue;
    auto* a = n.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(0.f);
  }
}

// Opsets 1 to 6 are brought to opset 7 by onnx's own version converter (its adapters know each op's
// schema changes); graphrun's kernels and rules know opsets 7 and up. Says so once per model on stderr.
void convert_old_opset(onnx::ModelProto& m, const std::string& what) {
  int64_t from = 0;
  for (const auto& op : m.opset_import())
    if (normal_domain(op.domain()).empty()) from = op.version();
  if (from == 0 || from >= kMinOpset) return;
  // The converter's importer takes every name a node or the graph reads for a value defined before
  // it (a null pointer otherwise: SIGSEGV), and onnx's checker, which would refuse such a model,
  // skips any model with an experimental op. So graphrun refuses those itself, and subgraphs.
  const auto& gp = m.graph();
  std::set<std::string> defined;
  for (const auto& v : gp.input()) defined.insert(v.name());
  for (const auto& t : gp.initializer()) defined.insert(t.name());
  for (const auto& n : gp.node()) {
    const auto* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(from), n.domain());
    GR_CHECK(schema && schema->support_level() != onnx::OpSchema::SupportType::EXPERIMENTAL,
             what << ": ONNX opset " << from << " cannot be converted to opset " << kMinOpset << ": node '" << n.name()
                  << "' (" << n.op_type() << ") is " << (schema ? "an experimental op" : "not an op of that opset"));
    for (const auto& a : n.attribute())
      GR_CHECK(!a.has_g() && a.graphs_size() == 0, what << ": ONNX opset " << from << " cannot be converted to opset "
                                                        << kMinOpset << ": node '" << n.name() << "' has a subgraph");
    for (const auto& in : n.input())
      GR_CHECK(in.empty() || defined.count(in), what << ": ONNX opset " << from << " cannot be converted to opset "
                                                     << kMinOpset << ": node '" << n.name() << "' reads '" << in
                                                     << "', which no graph input, initializer or earlier node defines");
    for (const auto& out : n.output())
      GR_CHECK(out.empty() || defined.insert(out).second,
               what << ": node '" << n.name() << "' writes '" << out << "', which is defined twice");
  }
  for (const auto& v : gp.output())
    GR_CHECK(defined.count(v.name()), what << ": graph output '" << v.name() << "' is defined by nothing");
  try {
    onnx::checker::check_model(m);  // the converter assumes a well-formed model
    mend_for_converter(m);
    m = onnx::version_conversion::ConvertVersion(m, static_cast<int>(kMinOpset));
    mend_converted(m);
  } catch (const std::exception& e) {
    GR_FAIL(what << ": ONNX opset " << from << " could not be converted to opset " << kMinOpset
                 << " (onnx's version converter: " << first_line(e.what()) << ")");
  }
  static std::set<std::string> said;
  if (said.insert(what).second)
    std::cerr << "graphrun: " << what << ": opset " << from << " converted to opset " << kMinOpset
              << " on load (onnx's version converter)\n";
}

// The Graph of a checked model; `detached` holds the initializers detach_initializers took out (their
// placeholder inputs become initializers again here).
Graph graph_from_proto(onnx::ModelProto& m, const std::string& what, Weights detached) {
  const auto& gp = m.graph();
  Graph g;
  g.name = gp.name().empty() ? "graph" : gp.name();
  g.doc = gp.doc_string();
  g.ir_version = m.ir_version();
  g.producer_name = m.producer_name();
  g.meta.producer_version = m.producer_version();
  g.meta.doc = m.doc_string();
  g.meta.domain = m.domain();
  g.meta.model_version = m.model_version();
  for (const auto& p : m.metadata_props()) g.meta.props.emplace_back(p.key(), p.value());
  for (const auto* list : {&gp.input(), &gp.output()})
    for (const auto& v : *list)
      if (!v.doc_string().empty()) g.meta.value_docs[v.name()] = v.doc_string();
  g.external_data = detached.external;
  for (const auto& op : m.opset_import()) g.opsets[normal_domain(op.domain())] = op.version();

  auto add_initializer = [&](const std::string& name, Tensor v) {
    ValueInfo vi;
    vi.dtype = v.dtype();
    vi.has_shape = true;
    for (int64_t d : v.shape()) vi.shape.emplace_back(d);
    g.values[name] = vi;
    g.initializers[name] = std::move(v);
  };
  for (auto& [name, v] : detached.tensors) add_initializer(name, std::move(v));
  for (const auto& t : gp.initializer()) {
    GR_CHECK(!t.name().empty(), what << ": an initializer has no name");
    add_initializer(t.name(), tensor_from_proto(t, what + ": initializer '" + t.name() + "'"));
  }
  auto add_info = [&](const onnx::ValueInfoProto& v) {
    if (v.name().empty() || !v.has_type()) return;
    ValueInfo found = value_info_from_type(v.type());
    auto it = g.values.find(v.name());
    g.values[v.name()] = it == g.values.end() ? found : merge_info(it->second, found);
  };
  for (const auto& v : gp.input()) {
    add_info(v);
    // Old exporters list initializers among the inputs too; those are parameters, not runtime inputs.
    if (!g.is_initializer(v.name()) && !g.is_input(v.name())) g.inputs.push_back(v.name());
  }
  for (const auto& v : gp.value_info()) add_info(v);
  for (const auto& v : gp.output()) {
    add_info(v);
    g.outputs.push_back(v.name());
  }

  std::vector<size_t> unnamed;
  for (const auto& np : gp.node()) {
    Node n;
    n.name = np.name();
    n.op_type = np.op_type();
    n.domain = normal_domain(np.domain());
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute()) {
      if (!a.ref_attr_name().empty()) GR_FAIL(what << ": " << n.describe() << ": attribute references are not supported");
      n.attrs[a.name()] = attribute_from_proto(a, n, what);
    }
    if (n.name.empty()) unnamed.push_back(g.nodes.size());
    g.nodes.push_back(std::move(n));
  }
  // Every node needs a name: error messages and tables refer to nodes by name.
  for (size_t i : unnamed) g.nodes[i].name = g.unique_name(g.nodes[i].op_type);
  try {
    g.topo_sort();
  } catch (const Error& e) {
    GR_FAIL(what << ": " << e.what());
  }
  return g;
}

std::string read_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) GR_FAIL(path << ": no such file");
  if (S_ISDIR(st.st_mode)) GR_FAIL(path << ": is a directory, not an ONNX file");
  std::ifstream f(path, std::ios::binary);
  if (!f) GR_FAIL(path << ": cannot open for reading");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) GR_FAIL(path << ": read error");
  return ss.str();
}

// ---- writing ----

void set_type(const ValueInfo& vi, onnx::TypeProto* type) {
  auto* tt = type->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(vi.dtype));
  if (!vi.has_shape) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : vi.shape) {
    auto* dp = shape->add_dim();
    if (d.known()) dp->set_dim_value(d.size);
    else if (!d.param.empty()) dp->set_dim_param(d.param);
  }
}

void attribute_to_proto(const std::string& name, const Attribute& a, onnx::AttributeProto* p) {
  using AP = onnx::AttributeProto;
  p->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::Float: p->set_type(AP::FLOAT); p->set_f(a.f); break;
    case Attribute::Kind::Int: p->set_type(AP::INT); p->set_i(a.i); break;
    case Attribute::Kind::String: p->set_type(AP::STRING); p->set_s(a.s); break;
    case Attribute::Kind::Tensor: p->set_type(AP::TENSOR); tensor_to_proto(a.t, "", p->mutable_t()); break;
    case Attribute::Kind::Floats:
      p->set_type(AP::FLOATS);
      for (float v : a.floats) p->add_floats(v);
      break;
    case Attribute::Kind::Ints:
      p->set_type(AP::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
      break;
    case Attribute::Kind::Strings:
      p->set_type(AP::STRINGS);
      for (const auto& v : a.strings) p->add_strings(v);
      break;
    default: GR_FAIL("attribute '" << name << "' has no value");
  }
}

bool has_type(const ValueInfo* vi) { return vi && vi->dtype != DType::Undefined; }

// Builds the ModelProto. Values whose type is unknown are written without one (inference may add it).
// The weights kDetachBytes allows stay out, a typed graph input in the place of each, for checking and
// inference; attach_weights puts them in when the model is written.
onnx::ModelProto model_from_graph(const Graph& g) {
  onnx::ModelProto m;
  // IR 4 is the first that lets initializers stay out of the graph inputs, as graphrun writes them.
  m.set_ir_version(g.ir_version >= 4 && g.ir_version <= kMaxIrVersion ? g.ir_version : kMaxIrVersion);
  m.set_producer_name(g.producer_name.empty() ? "graphrun" : g.producer_name);
  // What the model said of itself, as it said it.
  if (!g.producer_name.empty() && !g.meta.producer_version.empty()) m.set_producer_version(g.meta.producer_version);
  if (!g.meta.doc.empty()) m.set_doc_string(g.meta.doc);
  if (!g.meta.domain.empty()) m.set_domain(g.meta.domain);
  if (g.meta.model_version) m.set_model_version(g.meta.model_version);
  for (const auto& [k, v] : g.meta.props) {
    auto* p = m.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }

  std::map<std::string, int64_t> opsets;
  for (const auto& [d, v] : g.opsets) opsets[normal_domain(d)] = v;
  for (const Node& n : g.nodes) {
    std::string d = normal_domain(n.domain);
    if (!opsets.count(d)) opsets[d] = d.empty() ? kMaxOpset : 1;
  }
  if (!opsets.count("")) opsets[""] = kMaxOpset;
  for (const auto& [d, v] : opsets) {
    auto* op = m.add_opset_import();
    op->set_domain(d);
    op->set_version(v);
  }

  auto* gp = m.mutable_graph();
  gp->set_name(!g.meta.graph_name.empty() && g.name == g.meta.shown_as ? g.meta.graph_name : g.name);
  if (!g.doc.empty()) gp->set_doc_string(g.doc);
  auto add_vi = [&](const std::string& name, google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list) {
    auto* v = list->Add();
    v->set_name(name);
    if (auto it = g.meta.value_docs.find(name); it != g.meta.value_docs.end()) v->set_doc_string(it->second);
    const ValueInfo* vi = g.info(name);
    if (has_type(vi)) set_type(*vi, v->mutable_type());
  };
  for (const auto& name : g.inputs) add_vi(name, gp->mutable_input());
  for (const auto& name : g.outputs) add_vi(name, gp->mutable_output());
  for (const auto& [name, t] : g.initializers) {
    if (detachable(static_cast<int32_t>(t.dtype())) && t.nbytes() > kDetachBytes)
      add_placeholder_input(*gp, name, t.dtype(), t.shape());
    else
      tensor_to_proto(t, name, gp->add_initializer());
  }

  std::set<std::string> listed(g.inputs.begin(), g.inputs.end());
  listed.insert(g.outputs.begin(), g.outputs.end());
  for (const Node& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    if (!normal_domain(n.domain).empty()) np->set_domain(n.domain);
    for (const auto& i : n.inputs) np->add_input(i);
    for (const auto& o : n.outputs) np->add_output(o);
    for (const auto& [k, a] : n.attrs) {
      try {
        attribute_to_proto(k, a, np->add_attribute());
      } catch (const Error& e) {
        GR_FAIL("graph '" << g.name << "': " << n.describe() << ": " << e.what());
      }
    }
    for (const auto& o : n.outputs) {
      const ValueInfo* vi = g.info(o);
      if (o.empty() || listed.count(o) || !has_type(vi)) continue;
      auto* v = gp->add_value_info();
      v->set_name(o);
      set_type(*vi, v->mutable_type());
    }
  }
  return m;
}

// Runs ONNX shape inference on `m` in place; graphrun's schemas make its own ops inferable, and
// passes::fill_reshape_dims, fill_slice_ranks and fill_resize_ranks fill in the Reshapes, Slices and Resizes
// ONNX leaves unknown (torch's flatten, chunk and interpolate to a computed size), reading the shape
// tensors' values from ONNX's data propagation and from passes::propagate_shape_values (the products of
// symbols and the Divs ONNX's leaves unknown: torch's attention reshapes to [T, N * heads, head_dim]).
// ONNX names the unknown dimensions it creates "unk__0", "unk__1", ...; graphrun shows those as "?"
// (symbols the model itself uses, such as "N", stay).
void run_inference(onnx::ModelProto& m, bool strict, passes::ShapeData* shape_data_out = nullptr) {
  register_graphrun_schemas();
  auto dims_of = [&](auto&& visit) {
    auto* g = m.mutable_graph();
    for (auto* list : {g->mutable_input(), g->mutable_value_info(), g->mutable_output()})
      for (auto& v : *list)
        if (v.type().has_tensor_type() && v.type().tensor_type().has_shape())
          for (auto& d : *v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) visit(d);
  };
  std::set<std::string> own_symbols;
  dims_of([&](onnx::TensorShapeProto_Dimension& d) {
    if (d.has_dim_param()) own_symbols.insert(d.dim_param());
  });
  onnx::ShapeInferenceOptions opts(/*check_type=*/strict, /*strict_mode=*/strict ? 1 : 0, /*data_prop=*/true);
  // ONNX's data propagation of Shape and Size reads its input's type unchecked, and a value whose producer
  // could not be inferred (a MatMul of mismatched sizes, in a non-strict round) has none: the process
  // would crash. A round without data propagation types what it can first; the inputs of Shape and Size
  // still untyped then get an empty tensor type for the propagating round, taken away after it.
  auto infer = [&](std::unordered_map<std::string, onnx::TensorShapeProto>* data) {
    auto* g = m.mutable_graph();
    // The inputs of Shape and Size without a type in `m` as it stands.
    auto untyped = [&] {
      std::set<std::string> typed, found;
      for (const auto* list : {&g->input(), &g->value_info(), &g->output()})
        for (const auto& v : *list)
          if (v.has_type()) typed.insert(v.name());
      for (const auto& t : g->initializer()) typed.insert(t.name());
      for (const auto& n : g->node())
        if ((n.op_type() == "Shape" || n.op_type() == "Size") && n.input_size() >= 1 && !n.input(0).empty() &&
            !typed.count(n.input(0)))
          found.insert(n.input(0));
      return found;
    };
    std::set<std::string> stand_ins = untyped();
    if (!stand_ins.empty()) {  // (the later rounds start typed: no extra inference there)
      onnx::ShapeInferenceOptions plain = opts;
      plain.enable_data_propagation = false;
      onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), plain);
      stand_ins = untyped();
    }
    for (const auto& name : stand_ins) {
      auto* v = g->add_value_info();
      v->set_name(name);
      v->mutable_type()->mutable_tensor_type();
    }
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), opts, data);
    if (stand_ins.empty()) return;
    auto* vi = g->mutable_value_info();
    for (int i = vi->size() - 1; i >= 0; --i)
      if (stand_ins.count(vi->Get(i).name()) && !vi->Get(i).type().tensor_type().elem_type()) vi->DeleteSubrange(i, 1);
  };
  std::unordered_map<std::string, onnx::TensorShapeProto> shape_data;
  infer(strict ? nullptr : &shape_data);
  if (strict) return;
  auto forget_generated = [&] {
    dims_of([&](onnx::TensorShapeProto_Dimension& d) {
      if (d.has_dim_param() && d.dim_param().rfind("unk__", 0) == 0 && !own_symbols.count(d.dim_param()))
        d.clear_dim_param();
    });
  };
  forget_generated();
  // More passes carry what graphrun's own rules found to the nodes downstream (a filled Slice can make
  // a later Reshape's target computable): each round may reach one more Resize or Reshape of a chain (a
  // UNet's decoder has several), so rounds go on while something is filled, within a bound.
  for (int round = 0; round < 32; ++round) {
    passes::propagate_shape_values(m, shape_data);
    const bool reshaped = passes::fill_reshape_dims(m, shape_data);
    const bool sliced = passes::fill_slice_ranks(m, shape_data);
    const bool resized = passes::fill_resize_ranks(m, shape_data);
    const bool axes = passes::fill_old_negative_axes(m);
    if (!reshaped && !sliced && !resized && !axes) break;
    shape_data.clear();
    infer(&shape_data);
    forget_generated();
  }
  if (shape_data_out) *shape_data_out = std::move(shape_data);
}

// Graph outputs need a type in a valid model, and viewers (Netron) show value_info: take both from
// inference where the graph did not know them.
void add_inferred_types(onnx::ModelProto& m) {
  onnx::ModelProto inferred = m;
  try {
    run_inference(inferred, false);
  } catch (const std::exception&) {
    return;  // the checker reports the problem where it matters
  }
  std::set<std::string> typed;
  for (const auto& v : m.graph().input()) typed.insert(v.name());
  for (const auto& v : m.graph().value_info()) typed.insert(v.name());
  std::map<std::string, const onnx::TypeProto*> found;
  for (const auto& v : inferred.graph().value_info()) found[v.name()] = &v.type();
  for (const auto& v : inferred.graph().output())
    if (v.has_type()) found[v.name()] = &v.type();
  for (auto& o : *m.mutable_graph()->mutable_output()) {
    typed.insert(o.name());
    if (!o.has_type() && found.count(o.name())) *o.mutable_type() = *found[o.name()];
  }
  for (const auto& v : inferred.graph().value_info())
    if (!typed.count(v.name())) *m.mutable_graph()->add_value_info() = v;
}

void check_model_proto(const onnx::ModelProto& m, const std::string& what) {
  register_graphrun_schemas();
  for (const auto& o : m.graph().output())
    if (!o.has_type() || !o.type().tensor_type().has_shape())
      GR_FAIL(what << ": output '" << o.name() << "' has no known " << (o.has_type() ? "rank" : "type")
                   << "; an ONNX model needs the type and rank of every output");
  for (const auto& i : m.graph().input())
    if (!i.has_type() || !i.type().tensor_type().has_shape())
      GR_FAIL(what << ": input '" << i.name() << "' has no known " << (i.has_type() ? "rank" : "type")
                   << "; an ONNX model needs the type and rank of every input");
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto copy = m;
    run_inference(copy, true);
  } catch (const std::exception& e) {
    GR_FAIL(what << ": the exported model is not valid ONNX: " << first_line(e.what()));
  }
}

// Past this many bytes of weights a model is written with external data: one protobuf message cannot
// exceed 2 GiB, and the rest of the model needs room below that.
constexpr size_t kExternalDataBytes = size_t{1} << 30;

// Puts the weights model_from_graph left out into `m`, its initializers in the graph's order, and takes
// away the inputs that stood for them. With `external_path`, every initializer of 1 KiB or more goes into one
// file beside the model instead, that path's file name + ".data", each at an offset aligned to 4 KiB (so a
// reader may map it), as onnx.save(..., save_as_external_data=True, all_tensors_to_one_file=True) lays them
// out; smaller ones stay inside. Bytes go from the tensors to the file: none is copied into the model.
// The external data file is returned written but not yet renamed into place (nullptr when none was needed): the
// caller commits it with the model, so that a failed write leaves both files as they were.
std::unique_ptr<AtomicFile> attach_weights(onnx::ModelProto& m, const Graph& g, const std::string& external_path = "") {
  auto* gp = m.mutable_graph();
  const int real_inputs = static_cast<int>(g.inputs.size());
  if (gp->input_size() > real_inputs) gp->mutable_input()->DeleteSubrange(real_inputs, gp->input_size() - real_inputs);
  google::protobuf::RepeatedPtrField<onnx::TensorProto> inside;
  inside.Swap(gp->mutable_initializer());
  std::map<std::string, onnx::TensorProto*> by_name;
  for (auto& t : inside) by_name[t.name()] = &t;
  const size_t slash = external_path.rfind('/');
  const std::string location =
      (slash == std::string::npos ? external_path : external_path.substr(slash + 1)) + ".data";
  const std::string file = external_path + ".data";
  std::unique_ptr<AtomicFile> f;
  int64_t offset = 0;
  for (const auto& [name, t] : g.initializers) {
    onnx::TensorProto* p = gp->add_initializer();
    if (external_path.empty() || t.nbytes() < 1024) {
      if (auto it = by_name.find(name); it != by_name.end()) p->Swap(it->second);
      else tensor_to_proto(t, name, p);
      continue;
    }
    GR_CHECK(t.device().is_cpu(), "tensor '" << name << "' is on " << t.device().str() << ", not the host");
    if (!f) f = std::make_unique<AtomicFile>(file);
    const int64_t aligned = (offset + 4095) / 4096 * 4096;
    if (aligned > offset) f->write(std::string(static_cast<size_t>(aligned - offset), '\0'));
    const auto n = static_cast<int64_t>(t.nbytes());
    f->write(t.raw(), static_cast<size_t>(n));
    offset = aligned + n;
    p->set_name(name);
    p->set_data_type(static_cast<int32_t>(t.dtype()));
    for (int64_t d : t.shape()) p->add_dims(d);
    auto entry = [&](const char* key, const std::string& value) {
      auto* e = p->add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    entry("location", location);
    entry("offset", std::to_string(aligned));
    entry("length", std::to_string(n));
    p->set_data_location(onnx::TensorProto::EXTERNAL);
  }
  return f;
}

}  // namespace

bool small_control_value(const Tensor& t) {
  return (t.dtype() == DType::I64 || t.dtype() == DType::I32 || t.dtype() == DType::Bool) && t.numel() <= 64;
}

namespace {

// Known small integer and bool graph inputs (graphrun run's) stand as initializers of their own names while control
// flow is decided: the evaluator of inline_static_ifs and unroll_static_loops reads them. Returns their names.
std::vector<std::string> bind_known_inputs(onnx::ModelProto& m, const KnownInputs* known) {
  std::vector<std::string> bound;
  if (!known) return bound;
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  for (const auto& in : m.graph().input()) {
    auto k = known->small.find(in.name());
    if (k == known->small.end() || inits.count(in.name()) || !in.type().has_tensor_type()) continue;
    const Tensor& t = k->second;
    if (!small_control_value(t) || static_cast<int32_t>(t.dtype()) != in.type().tensor_type().elem_type()) continue;
    // Of the declared shape too (else the run refuses the input, naming it).
    if (in.type().tensor_type().has_shape()) {
      const auto& dims = in.type().tensor_type().shape().dim();
      bool fits = dims.size() == t.rank();
      for (int d = 0; fits && d < dims.size(); ++d)
        fits = !dims[d].has_dim_value() || dims[d].dim_value() == t.dim(d);
      if (!fits) continue;
    }
    tensor_to_proto(t, in.name(), m.mutable_graph()->add_initializer());
    bound.push_back(in.name());
  }
  return bound;
}

// A graph loaded for one run holds for its inputs alone: a tensor input declared with symbolic dimensions takes the
// run's tensor's, so that what follows from the shapes (SplitToSequence's count of parts, an If on a dimension) is
// known when loading. An input whose declared shape the tensor does not fit keeps it (the run refuses the input,
// naming it).
void pin_known_shapes(onnx::ModelProto& m, const KnownInputs* known) {
  if (!known) return;
  for (auto& in : *m.mutable_graph()->mutable_input()) {
    auto k = known->tensors.find(in.name());
    if (k == known->tensors.end() || !in.type().has_tensor_type() || !in.type().tensor_type().has_shape()) continue;
    const Tensor& t = k->second;
    auto* dims = in.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim();
    bool fits = dims->size() == t.rank() && static_cast<int32_t>(t.dtype()) == in.type().tensor_type().elem_type();
    for (int d = 0; fits && d < dims->size(); ++d)
      fits = !dims->Get(d).has_dim_value() || dims->Get(d).dim_value() == t.dim(d);
    if (!fits) continue;
    for (int d = 0; d < dims->size(); ++d) dims->Mutable(d)->set_dim_value(t.dim(d));
  }
}

// "sequence", "optional", "optional(sequence)" for a type graphrun binds (of tensors), "unsupported" for another
// sequence or optional, "" for the rest.
std::string composite_type(const onnx::TypeProto& t) {
  if (t.has_sequence_type()) return t.sequence_type().elem_type().has_tensor_type() ? "sequence" : "unsupported";
  if (!t.has_optional_type()) return "";
  const onnx::TypeProto& e = t.optional_type().elem_type();
  if (e.has_tensor_type()) return "optional";
  return e.has_sequence_type() && e.sequence_type().elem_type().has_tensor_type() ? "optional(sequence)"
                                                                                  : "unsupported";
}

// A sequence or optional graph input of one run becomes the tensor inputs of its elements, NAME[0], NAME[1], ...,
// and the nodes that build it from them (SequenceConstruct or SequenceEmpty; Optional), which
// resolve_static_sequences follows as any sequence built in the graph.
std::vector<CompositeSlot> bind_composite_inputs(onnx::ModelProto& m, const KnownInputs* known,
                                                 const std::string& what) {
  std::vector<CompositeSlot> slots;
  if (!known) return slots;
  auto& g = *m.mutable_graph();
  std::set<std::string> inits, values, node_names;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  passes::static_values::collect_names(g, values, node_names);
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  auto node = [&](const std::string& op, const std::string& base, const std::vector<std::string>& in,
                  const std::string& out) -> onnx::NodeProto& {
    onnx::NodeProto& n = *nodes.Add();
    n.set_op_type(op);
    n.set_name(passes::static_values::unused(base, node_names));
    for (const auto& i : in) n.add_input(i);
    n.add_output(out);
    return n;
  };
  int position = 0;
  for (const auto& in : g.input()) {
    if (inits.count(in.name())) {
      *inputs.Add() = in;
      continue;
    }
    const int pos = position++;
    const std::string declared = composite_type(in.type());
    if (declared.empty()) {
      *inputs.Add() = in;
      continue;
    }
    const std::string& name = in.name();
    GR_CHECK(declared != "unsupported",
             what << ": input '" << name
                  << "' is a sequence or optional of values other than tensors; graphrun "
                     "reads sequences of tensors, and optionals of a tensor or of such a sequence");
    CompositeValue none;
    none.optional = true;
    none.none = true;
    none.sequence = declared == "optional(sequence)";
    auto it = known->composite.find(name);
    GR_CHECK(it != known->composite.end() || declared != "sequence",
             what << ": input '" << name << "' is a sequence, and no value was given for it");
    const CompositeValue& v = it == known->composite.end() ? none : it->second;
    GR_CHECK(v.type() == declared || (v.none && declared != "sequence"),
             what << ": input '" << name << "' is " << (declared == "sequence" ? "a " : "an ") << declared
                  << ", but the value given is " << (v.optional ? "an " : "a ") << v.type());
    const onnx::TypeProto& declared_elem =
        in.type().has_sequence_type() ? in.type().sequence_type().elem_type() : in.type().optional_type().elem_type();
    const onnx::TypeProto& tensor_type =
        declared_elem.has_sequence_type() ? declared_elem.sequence_type().elem_type() : declared_elem;
    CompositeSlot slot{name, declared, pos, v.none, {}};
    for (size_t k = 0; k < v.tensors.size(); ++k) {
      onnx::ValueInfoProto& part = *inputs.Add();
      part.set_name(passes::static_values::unused(name + "[" + std::to_string(k) + "]", values));
      *part.mutable_type() = tensor_type;
      // A main graph's input has a shape: where the file gives none, the rank of the value given.
      auto* tt = part.mutable_type()->mutable_tensor_type();
      if (!tt->has_shape())
        for (int d = 0; d < v.tensors[k].rank(); ++d) tt->mutable_shape()->add_dim();
      slot.parts.push_back(part.name());
    }
    std::string held = slot.parts.empty() ? std::string() : slot.parts[0];
    if (v.sequence && !v.none) {
      held = v.optional ? passes::static_values::unused(name + "/sequence", values) : name;
      if (slot.parts.empty()) {
        auto* a = node("SequenceEmpty", name + "/sequence", {}, held).add_attribute();
        a->set_name("dtype");
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(tensor_type.tensor_type().elem_type() ? tensor_type.tensor_type().elem_type()
                                                       : static_cast<int64_t>(onnx::TensorProto::FLOAT));
      } else {
        node("SequenceConstruct", name + "/sequence", slot.parts, held);
      }
    }
    if (v.optional) {
      onnx::NodeProto& o =
          node("Optional", name + "/optional", v.none ? std::vector<std::string>{} : std::vector{held}, name);
      if (v.none) {
        auto* a = o.add_attribute();
        a->set_name("type");
        a->set_type(onnx::AttributeProto::TYPE_PROTO);
        *a->mutable_tp() = declared_elem;
      }
    }
    slots.push_back(std::move(slot));
  }
  if (slots.empty()) return slots;
  g.mutable_input()->Swap(&inputs);
  for (const auto& n : g.node()) *nodes.Add() = n;
  g.mutable_node()->Swap(&nodes);
  return slots;
}

void unbind_known_inputs(onnx::ModelProto& m, const std::vector<std::string>& bound) {
  if (bound.empty()) return;
  const std::set<std::string> names(bound.begin(), bound.end());
  auto* inits = m.mutable_graph()->mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i)
    if (names.count(inits->Get(i).name())) inits->DeleteSubrange(i, 1);
}

// Ops whose values a second run would not repeat: a control value computed from them is left to the refusal.
bool draws_at_random(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  return op.rfind("Random", 0) == 0 || op == "Bernoulli" || op == "Multinomial" || op == "Dropout";
}

// What a load for one run computes values with (graphrun run's KnownInputs, the detached weights).
struct RunContext {
  const std::string& what;
  const passes::InferShapeData& infer;
  const Weights& weights;
  const KnownInputs& known;
  const std::vector<CompositeSlot>& composite;
  bool quiet = false;  // a scratch copy of the model: nothing said on stderr
};

// The values `names` of m's main graph, computed by the nodes `needed` (free of control flow) on the run's inputs;
// nullopt where the run cannot compute them (an input it has no tensor for, a value inference cannot type).
std::optional<std::map<std::string, Tensor>> compute_values(const onnx::ModelProto& m, const std::set<int>& needed,
                                                            const std::vector<std::string>& names,
                                                            const RunContext& run) {
  // The part of the model computing them, checked and inferred as the whole model would be; its outputs typed by
  // that inference, its inputs those its nodes read.
  onnx::ModelProto prefix = passes::static_values::model_of(m, needed);
  run.infer(prefix);
  auto* pg = prefix.mutable_graph();
  for (const auto& name : names) {
    const onnx::ValueInfoProto* typed = nullptr;
    for (const auto& v : pg->value_info())
      if (v.name() == name) typed = &v;
    if (!typed || !typed->type().tensor_type().has_shape()) return std::nullopt;
    *pg->add_output() = *typed;
  }
  std::set<std::string> read;
  for (const auto& n : pg->node())
    for (const auto& in : n.input()) read.insert(in);
  auto* inputs = pg->mutable_input();
  for (int i = inputs->size() - 1; i >= 0; --i)
    if (!read.count(inputs->Get(i).name())) inputs->DeleteSubrange(i, 1);
  std::string bytes;
  if (!prefix.SerializeToString(&bytes)) return std::nullopt;
  Graph part = load_onnx_bytes(bytes, run.what);
  std::map<std::string, Tensor> feeds;
  for (const auto& in : part.inputs) {
    if (auto w = run.weights.tensors.find(in); w != run.weights.tensors.end()) {
      feeds[in] = w->second;
    } else if (auto t = run.known.tensors.find(in); t != run.known.tensors.end()) {
      feeds[in] = t->second;
    } else {
      for (const auto& slot : run.composite)
        for (size_t k = 0; k < slot.parts.size(); ++k)
          if (slot.parts[k] == in) feeds[in] = run.known.composite.at(slot.name).tensors.at(k);
      if (!feeds.count(in)) return std::nullopt;  // an input the run does not give as a tensor (an image)
    }
  }
  return run.known.compute(std::move(part), feeds);
}

// Whether every node in `nodes` is free of control flow and of random draws (a second run would draw others).
bool computable(const onnx::GraphProto& g, const std::set<int>& nodes) {
  return std::none_of(nodes.begin(), nodes.end(),
                      [&](int j) { return passes::static_values::opaque(g.node(j)) || draws_at_random(g.node(j)); });
}

// graphrun run: an If's condition, a Loop's trip count or condition that the data decide (`if x.sum() > 0`, a count
// computed in floating point) is computed by running the part of the model before it on the run's inputs
// (KnownInputs::compute) and becomes a Constant the If or Loop reads, so that the passes can take it. Only values
// no control flow or random op computes. Returns how many it computed.
int compute_control_values(onnx::ModelProto& m, const RunContext& run) {
  namespace sv = passes::static_values;
  if (!run.known.compute) return 0;
  auto& g = *m.mutable_graph();
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer[o] = i;
  std::vector<std::pair<int, int>> wanted;  // (If or Loop node, its control input)
  std::vector<std::string> names;           // the values to compute
  std::set<int> needed;
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (!sv::default_domain(n.domain()) || (n.op_type() != "If" && n.op_type() != "Loop")) continue;
    for (int k = 0; k < std::min(n.op_type() == "If" ? 1 : 2, n.input_size()); ++k) {
      const std::string& v = n.input(k);
      auto p = producer.find(v);
      if (v.empty() || p == producer.end() || g.node(p->second).op_type() == "Constant") continue;
      const std::set<int> a = sv::ancestors(g, producer, v);
      if (!computable(g, a)) continue;
      wanted.emplace_back(i, k);
      if (std::find(names.begin(), names.end(), v) == names.end()) names.push_back(v);
      needed.insert(a.begin(), a.end());
    }
  }
  if (wanted.empty()) return 0;
  std::optional<std::map<std::string, Tensor>> found = compute_values(m, needed, names, run);
  if (!found) return 0;
  std::map<std::string, Tensor>& values = *found;
  std::set<std::string> value_names, node_names;
  sv::collect_names(g, value_names, node_names);
  google::protobuf::RepeatedPtrField<onnx::NodeProto> constants;
  std::map<std::string, std::string> constant_of;
  std::string said;
  std::set<std::string> counts;  // the values Loops read as their trip count
  for (const auto& [i, k] : wanted)
    if (g.node(i).op_type() == "Loop" && k == 0) counts.insert(g.node(i).input(0));
  for (const auto& name : names) {
    auto v = values.find(name);
    if (v == values.end() || v->second.numel() > sv::kMaxElements) continue;
    // torch 1.13 exports `range(int(t))` with the float t as the Loop's trip count, which ONNX types int64: a whole
    // number is read as the count it means.
    if (counts.count(name) && dtype_is_float(v->second.dtype()) && v->second.numel() == 1) {
      const double x = v->second.as_doubles()[0];
      if (!(x == std::floor(x) && std::fabs(x) < 9e18)) continue;
      v->second = Tensor::scalar<int64_t>(static_cast<int64_t>(x));
    }
    constant_of[name] = sv::unused(name + "/computed", value_names);
    *constants.Add() = sv::constant_node(v->second, sv::unused(name + "/computed", node_names), constant_of[name]);
    said += (said.empty() ? "'" : ", '") + name + "' = " + v->second.str(4);
  }
  int computed = 0;
  for (const auto& [i, k] : wanted)
    if (auto c = constant_of.find(g.node(i).input(k)); c != constant_of.end()) {
      g.mutable_node(i)->set_input(k, c->second);
      ++computed;
    }
  if (!computed) return 0;
  for (const auto& n : g.node()) *constants.Add() = n;
  g.mutable_node()->Swap(&constants);
  if (!run.quiet)
    std::cerr << "graphrun: " << run.what << ": control flow computed from this run's inputs: " << said << "\n";
  return computed;
}

// Whether a graph or its subgraphs draw at random.
bool draws_inside(const onnx::GraphProto& g) {
  for (const auto& n : g.node()) {
    if (draws_at_random(n)) return true;
    for (const auto& a : n.attribute()) {
      if (a.has_g() && draws_inside(a.g())) return true;
      for (const auto& sub : a.graphs())
        if (draws_inside(sub)) return true;
    }
  }
  return false;
}

// Loop `loop`'s body condition made true; with `collect`, the body's own condition becomes a new last scan output of
// the Loop, named `collect`. `values` and `nodes` hold the model's names.
void make_condition_true(onnx::NodeProto& loop, const std::string& collect, std::set<std::string>& values,
                         std::set<std::string>& nodes) {
  namespace sv = passes::static_values;
  for (auto& a : *loop.mutable_attribute()) {
    if (a.name() != "body" || !a.has_g()) continue;
    onnx::GraphProto& body = *a.mutable_g();
    const onnx::ValueInfoProto cond = body.output(0);
    const std::string truth = sv::unused(cond.name() + "/true", values);
    *body.add_node() = sv::constant_node(Tensor::scalar<bool>(true), sv::unused(cond.name() + "/true", nodes), truth);
    body.mutable_output(0)->set_name(truth);
    if (!collect.empty()) {
      *body.add_output() = cond;
      loop.add_output(collect);
    }
  }
}

// m's Loop `i` reads `count` as its trip count, a Constant put first in the graph.
void set_trip_count(onnx::ModelProto& m, int i, int64_t count, std::set<std::string>& values,
                    std::set<std::string>& nodes) {
  namespace sv = passes::static_values;
  auto& g = *m.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
  const std::string base = (g.node(i).name().empty() ? std::string("Loop") : g.node(i).name()) + "/trip_count";
  const std::string output = sv::unused(base, values);
  *out.Add() = sv::constant_node(Tensor::scalar<int64_t>(count), sv::unused(base, nodes), output);
  if (g.node(i).input_size() == 0) g.mutable_node(i)->add_input();
  g.mutable_node(i)->set_input(0, output);
  for (const auto& n : g.node()) *out.Add() = n;
  g.mutable_node()->Swap(&out);
}

// graphrun run: a Loop whose trip count and first condition are known but whose body decides from the data when to
// stop (torch.jit.script's `while` on the data) runs as many times as the data say. In a scratch copy of the model
// the body's condition becomes true and a new scan output collects the body's own condition, and the Loop is
// unrolled k = 1, 2, 4, ... iterations (within the unrolling limit), those conditions computed from the run's inputs
// until one is false or the trip count is reached. The Loop then gets that many iterations as its trip count and a
// body whose condition is true, which unroll_static_loops takes. One Loop at a time; returns 1 where it counted one.
int compute_loop_counts(onnx::ModelProto& m, const RunContext& run, int64_t budget) {
  namespace sv = passes::static_values;
  if (!run.known.compute) return 0;
  auto& g = *m.mutable_graph();
  const passes::ShapeData no_shapes;
  sv::Evaluator ev(g, no_shapes);
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (!sv::default_domain(n.domain()) || n.op_type() != "Loop" || n.input_size() < 2) continue;
    const auto* body_attr = sv::attr(n, "body");
    if (!body_attr || !body_attr->has_g()) continue;
    const onnx::GraphProto& body = body_attr->g();
    if (body.input_size() != n.input_size() || body.output_size() < n.input_size() - 1 || draws_inside(body)) continue;
    int64_t most = std::numeric_limits<int64_t>::max();
    if (!n.input(0).empty()) {
      const std::optional<sv::Value> c = ev.value_of(n.input(0));
      if (!c || c->data.size() != 1) continue;
      most = c->data[0];
    }
    if (!n.input(1).empty()) {
      const std::optional<sv::Value> c = ev.value_of(n.input(1));
      if (!c || c->data.size() != 1 || c->data[0] == 0) continue;
    }
    const bool counted = std::any_of(body.node().begin(), body.node().end(), [&](const onnx::NodeProto& b) {
      return b.op_type() == "Constant" && b.output_size() == 1 && b.output(0) == body.output(0).name();
    });
    if (most <= 0 || counted) continue;
    const int64_t per_iteration = std::max(1, body.node_size() + 4);
    int64_t trips = -1;
    for (int64_t k = 1;; k = std::min(most, 2 * k)) {
      onnx::ModelProto trial = m;
      std::set<std::string> values, nodes;
      sv::collect_names(trial.graph(), values, nodes);
      const std::string conds = sv::unused((n.name().empty() ? std::string("Loop") : n.name()) + "/conditions", values);
      make_condition_true(*trial.mutable_graph()->mutable_node(i), conds, values, nodes);
      set_trip_count(trial, i, k, values, nodes);
      // The copy unrolled, and what its iterations decide from the data (an If of `a and b` in the body) computed.
      RunContext scratch = run;
      scratch.quiet = true;
      try {
        for (int64_t trial_budget = budget;;) {
          const int unrolled = passes::unroll_static_loops(trial, run.what, run.infer, trial_budget, /*quiet=*/true);
          const int inlined = passes::inline_static_ifs(trial, run.what, run.infer);
          if (!passes::resolve_static_sequences(trial, run.what, nullptr, &run.infer) && !unrolled && !inlined &&
              !compute_control_values(trial, scratch))
            break;
        }
      } catch (const Error&) {
        break;  // past the unrolling limit: the Loop is refused as before
      }
      std::map<std::string, int> producer;
      for (int j = 0; j < trial.graph().node_size(); ++j)
        for (const auto& o : trial.graph().node(j).output()) producer[o] = j;
      if (!producer.count(conds)) break;  // not unrolled
      const std::set<int> needed = sv::ancestors(trial.graph(), producer, conds);
      if (!computable(trial.graph(), needed)) break;
      const std::optional<std::map<std::string, Tensor>> c = compute_values(trial, needed, {conds}, run);
      if (!c || !c->count(conds)) break;
      const std::vector<int64_t> stop = c->at(conds).as_int64s();
      const auto first_false = std::find(stop.begin(), stop.end(), int64_t{0});
      if (first_false != stop.end()) {
        trips = (first_false - stop.begin()) + 1;
        break;
      }
      if (k >= most) {
        trips = most;
        break;
      }
      if (2 * k > budget / per_iteration) break;
    }
    if (trips < 0) continue;
    std::set<std::string> values, nodes;
    sv::collect_names(g, values, nodes);
    make_condition_true(*g.mutable_node(i), "", values, nodes);
    const std::string name = n.name();
    set_trip_count(m, i, trips, values, nodes);
    std::cerr << "graphrun: " << run.what << ": the condition of "
              << (name.empty() ? "a Loop" : "'" + name + "' (Loop)") << " computed from this run's inputs: " << trips
              << " iteration" << (trips == 1 ? "" : "s") << "\n";
    return 1;
  }
  return 0;
}

std::vector<LoadExpansion>& load_expansions() {
  static std::vector<LoadExpansion> registered;
  return registered;
}

Graph load_model(std::string bytes, const std::string& what, const std::string& dir, const KnownInputs* known,
                 bool training) {
  register_graphrun_schemas();
  if (bytes.empty()) GR_FAIL(what << ": empty file, not an ONNX model");
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes))
    GR_FAIL(what << ": not a valid ONNX model (the protobuf does not parse: the file is truncated, corrupt, or "
                    "not ONNX)");
  std::string().swap(bytes);  // the file's bytes are in the model now
  if (!m.has_graph() || m.ir_version() <= 0)
    GR_FAIL(what << ": not an ONNX model (no " << (m.has_graph() ? "ir_version" : "graph") << " in the file)");
  if (m.ir_version() > kMaxIrVersion + 5)
    GR_FAIL(what << ": ONNX IR version " << m.ir_version() << " is newer than graphrun reads (up to "
                 << kMaxIrVersion + 5 << ")");
  // IR 9 to 13 added element types (float8, int4, float4, float8e8m0, int2) graphrun has none of (the checker
  // refuses a model that uses one) and features it does not read (11's multi-device configurations); a model
  // without them reads as IR 8.
  if (m.ir_version() > kMaxIrVersion) m.set_ir_version(kMaxIrVersion);
  inline_functions(m, what);
  check_opsets(m, what);
  Weights weights = detach_initializers(m, what, dir);
  // An If whose condition the shapes decide (torch's squeeze of a dimension it could not size) becomes the
  // branch it takes; the nodes computing the condition are checked and inferred first, as the whole model is.
  const passes::InferShapeData infer = [&](onnx::ModelProto& prefix) {
    check_supported_features(prefix, what);
    convert_old_opset(prefix, what);
    lower_new_opset(prefix, what);
    decompose_missing_ops(prefix, what);
    validate_model(prefix, what);
    sort_nodes(prefix.mutable_graph(), what);
    validate_before_inference(prefix, what, [](onnx::ModelProto& part) { run_inference(part, false); });
    passes::ShapeData data;
    try {
      run_inference(prefix, false, &data);
    } catch (const std::exception& e) {
      GR_FAIL(what << ": shape inference failed: " << first_line(e.what()));
    }
    return data;
  };
  pin_known_shapes(m, known);
  const std::vector<std::string> bound = bind_known_inputs(m, known);
  std::vector<CompositeSlot> composite_inputs = bind_composite_inputs(m, known, what), composite_outputs;
  passes::inline_static_ifs(m, what, infer);
  // The Loop torch writes for nn.EmbeddingBag becomes the same computation without a loop.
  passes::vectorize_bag_loops(m, what);
  // Loops and Scans of a count known now become copies of their bodies; what they unroll may hold Ifs on the
  // iteration number, and Loops of their own.
  // Then the sequences of what they unrolled (a scripted list appended to in a loop) hold known tensors.
  // Under graphrun run, what the data decide is computed then from the run's inputs.
  for (int64_t budget = passes::kMaxUnrolledNodes;;) {
    const int unrolled = passes::unroll_static_loops(m, what, infer, budget);
    const int inlined = passes::inline_static_ifs(m, what, infer);
    std::vector<std::string> said;
    const int resolved = passes::resolve_static_sequences(m, what, known ? &composite_outputs : nullptr, &infer, &said);
    for (const auto& note : said) std::cerr << "graphrun: " << what << ": " << note << "\n";
    if (resolved || unrolled || inlined) continue;
    if (!known) break;
    const RunContext run{what, infer, weights, *known, composite_inputs};
    if (!compute_control_values(m, run) && !compute_loop_counts(m, run, budget)) break;
  }
  check_supported_features(m, what);
  // Opsets 18 to 28 are lowered with the known inputs still bound: for this run, an axes, pads or shape input
  // given small is the constant the opset-17 form needs (as ONNX's node tests give ReduceMean-18 its axes).
  // (Opsets below 7, which convert_old_opset brings up, are never lowered.) A node whose rewriting needs a shape
  // the file does not state gets its inputs' types from the nodes rewritten before it, checked and inferred as
  // the whole model is.
  const InferTypes infer_types = [&](onnx::ModelProto& prefix) {
    validate_model(prefix, what);
    sort_nodes(prefix.mutable_graph(), what);
    validate_before_inference(prefix, what, [](onnx::ModelProto& part) { run_inference(part, false); });
    run_inference(prefix, false);
  };
  lower_new_opset(m, what, infer_types);
  unbind_known_inputs(m, bound);
  convert_old_opset(m, what);
  decompose_missing_ops(m, what, infer_types);
  // A model file is untrusted: ONNX's checker and inference see only what graph/validate.h passed.
  validate_model(m, what);
  sort_nodes(m.mutable_graph(), what);
  try {
    if (composite_outputs.empty()) {
      onnx::checker::check_model(m);
    } else {
      // The outputs that stand for a sequence's elements take their types from inference (below), which the
      // checker does not wait for.
      onnx::ModelProto checked = m;
      auto* outs = checked.mutable_graph()->mutable_output();
      for (int i = outs->size() - 1; i >= 0; --i)
        if (!outs->Get(i).has_type()) outs->DeleteSubrange(i, 1);
      onnx::checker::check_model(checked);
    }
  } catch (const std::exception& e) {
    GR_FAIL(what << ": invalid ONNX model: " << first_line(e.what()));
  }
  validate_before_inference(m, what, [](onnx::ModelProto& prefix) { run_inference(prefix, false); });
  try {
    run_inference(m, false);
  } catch (const std::exception& e) {
    GR_FAIL(what << ": shape inference failed: " << first_line(e.what()));
  }
  validate_inferred(m, what);
  Graph g = graph_from_proto(m, what, std::move(weights));
  // What the exporter merged by value trains apart (before a Gradient node is expanded in the training form).
  if (training) passes::untie_initializers(g);
  for (LoadExpansion expand : load_expansions()) expand(g, what, training);
  g.composite_inputs = std::move(composite_inputs);
  g.composite_outputs = std::move(composite_outputs);
  return g;
}

Graph load_printable(std::string bytes, const std::string& what, const std::string& dir,
                     const KnownInputs* known = nullptr, bool training = false) {
  try {
    return load_model(std::move(bytes), what, dir, known, training);
  } catch (const Error& e) {
    throw Error(printable(e.what()));
  }
}

}  // namespace

bool register_load_expansion(LoadExpansion fn) {
  load_expansions().push_back(fn);
  return true;
}

Graph load_onnx_bytes(const std::string& bytes, const std::string& what) { return load_printable(bytes, what, ""); }

Graph load_onnx_bytes(const std::string& bytes, const std::string& what, const KnownInputs& known) {
  return load_printable(bytes, what, "", &known);
}

std::vector<DeclaredInput> onnx_inputs_of_bytes(const std::string& bytes, const std::string& what) {
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) GR_FAIL(what << ": not a valid ONNX model (the protobuf does not parse)");
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  std::vector<DeclaredInput> r;
  for (const auto& in : m.graph().input())
    if (!inits.count(in.name())) r.push_back({in.name(), composite_type(in.type()), value_info_from_type(in.type())});
  return r;
}

std::vector<DeclaredInput> onnx_inputs(const std::string& path) { return onnx_inputs_of_bytes(read_file(path), path); }

namespace {

Graph load_named(const std::string& path, const KnownInputs* known, bool training = false) {
  Graph g = load_printable(read_file(path), path, folder_of(path), known, training);
  // An exporter's default graph name says nothing of the model (torch names every export "torch_jit"):
  // messages ("training 'torch_jit'") name it by its file instead. A model saved keeps the name it had.
  static const std::set<std::string> generic = {"graph", "torch_jit", "torch-jit-export", "main_graph"};
  if (generic.count(g.name)) {
    const size_t slash = path.find_last_of('/');
    std::string stem = slash == std::string::npos ? path : path.substr(slash + 1);
    if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".onnx") == 0) stem.resize(stem.size() - 5);
    if (!stem.empty()) {
      g.meta.graph_name = g.name;
      g.name = g.meta.shown_as = printable(stem);
    }
  }
  return g;
}

}  // namespace

Graph load_onnx(const std::string& path) { return load_named(path, nullptr); }

Graph load_onnx(const std::string& path, const KnownInputs& known) { return load_named(path, &known); }

Graph load_onnx_for_training(const std::string& path) { return load_named(path, nullptr, true); }

std::string onnx_bytes(const Graph& g) {
  onnx::ModelProto m = model_from_graph(g);
  add_inferred_types(m);
  attach_weights(m, g);
  std::string out;
  GR_CHECK(m.SerializeToString(&out), "graph '" << g.name << "': cannot serialize as ONNX (over 2 GiB?)");
  return out;
}

void save_onnx(const Graph& g, const std::string& path, bool check) {
  onnx::ModelProto m = model_from_graph(g);
  add_inferred_types(m);
  if (check) check_model_proto(m, path);
  size_t weight_bytes = 0;
  for (const auto& [name, t] : g.initializers) weight_bytes += t.nbytes();
  const std::unique_ptr<AtomicFile> data =
      attach_weights(m, g, g.external_data || weight_bytes > kExternalDataBytes ? path : "");
  std::string out;
  GR_CHECK(m.SerializeToString(&out), path << ": cannot serialize graph '" << g.name << "' (over 2 GiB?)");
  // Written beside the target and renamed over it once complete: a full disk leaves the old file (even the
  // model being trained, under train --save) as it was, not truncated. Both files are on disk before either
  // is renamed, so the model never names weights that did not make it.
  AtomicFile f(path);
  f.write(out);
  if (data) data->sync();
  f.sync();
  if (data) data->commit();
  f.commit();
}

Graph convert_opset(const Graph& g, int64_t to) {
  const int64_t from = g.opset("");
  if (from == 0 || from >= to) return g;
  const std::string what = "model '" + g.name + "'";
  onnx::ModelProto m = model_from_graph(g);
  attach_weights(m, g);
  auto* gp = m.mutable_graph();
  // Before opset 14 a BatchNormalization in training mode had five outputs, the last two its saved mean
  // and variance for a backward pass (torch exports them); opset 14 dropped those, and the converter's
  // adapter refuses a node that still has them. Unread, they go; the node is in training mode.
  std::set<std::string> read;
  for (const auto& n : gp->node())
    for (const auto& in : n.input()) read.insert(in);
  for (const auto& o : gp->output()) read.insert(o.name());
  std::set<std::string> training_bn;
  for (auto& n : *gp->mutable_node()) {
    if (n.op_type() != "BatchNormalization" || !normal_domain(n.domain()).empty()) continue;
    for (int k = 3; k < n.output_size(); ++k)
      GR_CHECK(n.output(k).empty() || !read.count(n.output(k)),
               what << ": node '" << n.name() << "' (BatchNormalization) has its saved mean or variance (output " << k
                    << ", of opsets before 14) read by the model: opset " << from << " cannot be converted to opset "
                    << to << " for training");
    if (n.output_size() > 3) n.mutable_output()->DeleteSubrange(3, n.output_size() - 3);
    while (n.output_size() > 1 && n.output(n.output_size() - 1).empty()) n.mutable_output()->RemoveLast();
    if (n.output_size() > 1) training_bn.insert(n.output(0));
  }
  // (No checker first: the graph passed it on load, and an opset-9 BatchNormalization with three outputs,
  // as the adapter needs it, is not valid opset 9.)
  mend_for_converter(m);
  try {
    m = onnx::version_conversion::ConvertVersion(m, static_cast<int>(to));
  } catch (const std::exception& e) {
    GR_FAIL(what << ": ONNX opset " << from << " could not be converted to opset " << to
                 << " for training (onnx's version converter: " << first_line(e.what()) << ")");
  }
  mend_converted(m);
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() != "BatchNormalization" || n.output_size() == 0 || !training_bn.count(n.output(0))) continue;
    onnx::AttributeProto* a = find_attr(n, "training_mode");
    if (!a) a = n.add_attribute(), a->set_name("training_mode"), a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
  }
  std::string bytes;
  GR_CHECK(m.SerializeToString(&bytes), what << ": cannot serialize for the opset conversion (over 2 GiB?)");
  // (For training alone: a Gradient node still in the graph differentiates its training form.)
  Graph r = load_model(std::move(bytes), what + " (converted to opset " + std::to_string(to) + ")", "", nullptr, true);
  r.name = g.name;
  r.external_data = g.external_data;
  r.doc = g.doc;
  r.meta = g.meta;
  if (g.as_written) r.as_written = g.as_written;
  static std::set<std::string> said;
  if (said.insert(g.name).second)
    std::cerr << "graphrun: " << what << ": opset " << from << " converted to opset " << to
              << " for training (onnx's version converter)\n";
  return r;
}

bool reinfer_shapes(Graph& g) {
  Graph inferred = g;
  for (auto v = inferred.values.begin(); v != inferred.values.end();)
    v = inferred.is_input(v->first) || inferred.is_initializer(v->first) ? std::next(v) : inferred.values.erase(v);
  try {
    infer_shapes(inferred);
  } catch (const Error&) {
    return false;
  }
  for (auto& [v, info] : g.values)
    if (!g.is_input(v) && !g.is_initializer(v) && inferred.values.count(v)) info = inferred.values.at(v);
  return true;
}

void infer_shapes(Graph& g) {
  onnx::ModelProto m = model_from_graph(g);
  try {
    run_inference(m, false);
  } catch (const std::exception& e) {
    GR_FAIL("graph '" << g.name << "': shape inference failed: " << first_line(e.what()));
  }
  auto take = [&](const onnx::ValueInfoProto& v) {
    if (!v.has_type()) return;
    ValueInfo found = value_info_from_type(v.type());
    if (found.dtype == DType::Undefined && !found.has_shape) return;
    auto it = g.values.find(v.name());
    g.values[v.name()] = it == g.values.end() ? found : merge_info(it->second, found);
  };
  for (const auto& v : m.graph().input()) take(v);
  for (const auto& v : m.graph().value_info()) take(v);
  for (const auto& v : m.graph().output()) take(v);
}

}  // namespace graphrun
