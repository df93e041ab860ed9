// The one op table: every fact graphrun knows about an op (its kernel per device, the inputs it reads
// on the host, whether it computes shapes on the host, its gradient rule, its schema), registered once.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace graphrun {

namespace runtime { class KernelContext; }
namespace autodiff { class GradContext; }

// The layers above graph/ fill these in; graph/ only stores them (runtime/kernel.h, autodiff/rules/rules.h).
using KernelFn = void (*)(runtime::KernelContext&);
using GradRule = void (*)(autodiff::GradContext&);

constexpr int kDeviceKinds = 2;  // Device::Kind::CPU, Device::Kind::CUDA
inline int kind_index(Device::Kind k) { return static_cast<int>(k); }

// The ONNX schema of a graphrun op (domain ai.graphrun), written without ONNX types so that any
// family file can declare it; graph/graphrun_schemas.cc turns it into an onnx::OpSchema.
struct OpSchemaSpec {
  enum class Arity { Single, Optional, Variadic };
  struct Formal {
    std::string name, doc;
    std::string type;  // a type constraint ("T") or a type ("tensor(int64)")
    Arity arity = Arity::Single;
  };
  struct Attr {
    std::string name, doc;
    Attribute::Kind kind = Attribute::Kind::Undefined;
    std::optional<Attribute> default_value;  // none: optional, no default
  };
  struct TypeConstraint {
    std::string name;
    std::vector<std::string> types;
    std::string doc;
  };
  // How an output's type and shape follow from the inputs (the ONNX shape inference of the op).
  struct Inference {
    enum class Kind {
      LikeInput,        // output = type and shape of `input`
      EachLikeInput,    // every output i = input i (AllReduce)
      BiasOf,           // 1-D: dimension `axis` of `input`, times attribute `times_attr` when named
      ShapeFromValue,   // element type of input 0, shape = the value of `input` (SumToShape)
      OptimizerUpdates, // inputs R, T, then `axis` runs of n tensors (X.., G.., V.. [, H..]); outputs the
                        // new X.., V.. [, H..], each like its input (ai.onnx.preview.training's layout)
    };
    Kind kind = Kind::LikeInput;
    int output = 0, input = 0, axis = 0;
    std::string times_attr;
  };

  std::string doc;
  std::vector<Formal> inputs, outputs;
  std::vector<Attr> attrs;
  std::vector<TypeConstraint> types;
  std::vector<Inference> inference;

  explicit OpSchemaSpec(std::string d = "") : doc(std::move(d)) {}
  OpSchemaSpec& input(std::string name, std::string doc, std::string type, Arity a = Arity::Single);
  OpSchemaSpec& output(std::string name, std::string doc, std::string type, Arity a = Arity::Single);
  OpSchemaSpec& attr(std::string name, std::string doc, Attribute default_value);
  OpSchemaSpec& attr(std::string name, std::string doc, Attribute::Kind kind);  // optional, no default
  OpSchemaSpec& type(std::string name, std::vector<std::string> types, std::string doc);
  OpSchemaSpec& output_like(int output, int input);
  OpSchemaSpec& outputs_like_inputs();
  OpSchemaSpec& output_bias_of(int output, int input, int axis, std::string times_attr = "");
  OpSchemaSpec& output_shape_from(int output, int input);
  OpSchemaSpec& optimizer_updates(int groups);
  // The gradient op of a layer Y = f(X, P, B): inputs dY, X, P; outputs dX (like X), dP (like P) and
  // dB, each optional; float T. The caller says dB's shape.
  OpSchemaSpec& layer_gradient(const std::string& param);
};

// Type lists for OpSchemaSpec::type.
const std::vector<std::string>& float_tensor_types();    // float16, float, double, bfloat16
const std::vector<std::string>& numeric_tensor_types();  // those and every integer type

// What "gradient" an op has for autodiff.
enum class GradientKind {
  Missing,  // no rule (yet): an error naming op and node when the node lies on the path to the loss
  Rule,     // `rule` emits the backward nodes
  None,     // its outputs carry no gradient (integers, booleans, shapes, piecewise-constant values)
};

// Every fact of one op. A fact is registered once, by one family file; family_of says which.
struct OpFacts {
  std::string domain;  // "" is ai.onnx
  std::string op;
  std::string key;     // Node::op_key(): "Conv", "ai.graphrun::ConvGrad"

  std::array<KernelFn, kDeviceKinds> kernels{};
  // Input positions the kernels read on the host (a shape, axes, pads, starts...): a device
  // kernel copies those values back and waits for them unless they are host tensors already.
  // One declaration serves every device.
  std::vector<int> host_inputs;
  // May run on the host, with its CPU kernel, in a device graph's shape computations
  // (graph/passes/place_shape_computations.h); metadata_only: reads only its inputs' shapes.
  bool host_shapes = false;
  bool metadata_only = false;

  GradientKind gradient = GradientKind::Missing;
  GradRule rule = nullptr;
  // Outputs whose element type is fixed whatever the inputs' (comparisons: bool; Shape: i64).
  std::map<int, DType> output_dtypes;

  std::optional<OpSchemaSpec> schema;  // graphrun's own ops only

  // fact ("CPU kernel", "CUDA kernel", "host inputs", "host shapes", "gradient", "schema",
  // "type of output 1") -> the family that registered it
  std::map<std::string, std::string> families;

  KernelFn kernel(Device::Kind k) const { return kernels[kind_index(k)]; }
  bool reads_on_host(int input) const;
  const std::string& family_of(const std::string& fact) const;  // "" when not registered
};

class OpTable {
 public:
  const OpFacts* find(const std::string& op_key) const;  // nullptr when unknown
  const OpFacts* find(const Node& n) const { return find(n.op_key()); }
  const std::map<std::string, OpFacts>& ops() const { return ops_; }  // by key

 private:
  friend class OpRegistrar;
  std::map<std::string, OpFacts> ops_;
};

// The table, built on first use from every registration (thread-safe). Throws Error listing every
// fact registered twice. Never call it during static initialization: registrations may be missing then.
const OpTable& op_table();

// ---- registration (in family files) ----

class OpRegistrar;
using OpRegistration = void (*)(OpRegistrar&);

// The facts one family file gives one op; each setter may be called once per op in the whole program.
class OpEntry {
 public:
  OpEntry& kernel(Device::Kind k, KernelFn fn);
  OpEntry& cpu(KernelFn fn) { return kernel(Device::Kind::CPU, fn); }
  OpEntry& cuda(KernelFn fn) { return kernel(Device::Kind::CUDA, fn); }
  OpEntry& host_inputs(std::vector<int> inputs);
  OpEntry& host_shapes(bool metadata_only = false);
  OpEntry& gradient(GradRule rule);
  OpEntry& no_gradient();
  OpEntry& output_dtype(int output, DType t);
  OpEntry& schema(OpSchemaSpec s);

 private:
  friend class OpRegistrar;
  OpEntry(OpRegistrar& r, OpFacts& f) : reg_(r), facts_(f) {}
  OpRegistrar& reg_;
  OpFacts& facts_;
};

class OpRegistrar {
 public:
  OpEntry op(const std::string& op) { return this->op("", op); }
  OpEntry op(const std::string& domain, const std::string& op);
  const std::string& family() const { return family_; }

 private:
  friend class OpEntry;
  friend OpTable build_op_table(std::vector<std::pair<std::string, OpRegistration>>);
  OpRegistrar(OpTable& t, std::vector<std::string>& errors) : table_(t), errors_(errors) {}
  // Records that this family registers `fact` of `f`; two registrations of one fact are an error.
  void claim(OpFacts& f, const std::string& fact);
  OpTable& table_;
  std::vector<std::string>& errors_;
  std::string family_;
};

// Called by GR_REGISTER_OPS at static initialization; aborts if the table was already built.
bool add_op_registration(const char* family, OpRegistration fn);

// Builds a table from (family, registration) pairs, in family order; throws Error listing every fact
// registered twice. op_table() is this over every GR_REGISTER_OPS; tests build small ones.
OpTable build_op_table(std::vector<std::pair<std::string, OpRegistration>> registrations);

}  // namespace graphrun

// Registers the ops of one family file:
//   GR_REGISTER_OPS(elementwise) { ops.op("Add").cpu(add_kernel); ... }
// Each library of graphrun is linked whole (CMakeLists.txt), so these static registrars are never
// dropped by the linker although nothing refers to them. `family` names the file in messages and docs.
#define GR_REGISTER_OPS(family)                                                            \
  static void gr_register_ops_##family(::graphrun::OpRegistrar& ops);                      \
  [[maybe_unused]] static const bool gr_ops_registered_##family =                          \
      ::graphrun::add_op_registration(#family, gr_register_ops_##family);                  \
  static void gr_register_ops_##family(::graphrun::OpRegistrar& ops)
