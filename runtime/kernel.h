// The kernel interface: what a kernel sees of its node, its inputs and outputs, and the per-device dispatch
// table (a view of the op table, graph/op_table.h).
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/ir.h"
#include "graph/op_table.h"

namespace graphrun::runtime {

class Communicator;
class KernelContext;

// A kernel reads ctx.input(i), asks for each output with ctx.output(i, shape, dtype) and fills it.
// Kernels compute their own output shapes; the executor records them on the first run and plans memory.
// Bad input (shapes, attributes) is reported with GR_FAIL; the executor prefixes the node's name.
// Kernels are registered in the op table (graph/op_table.h) by their family files, runtime/kernels/<device>/.
using KernelFn = graphrun::KernelFn;

// The rest of an asynchronous kernel's work (see KernelContext::defer): waits for it, throws Error on failure.
using Completion = std::function<void()>;

// The kernels of one device: a view of the op table's column for that device (or, in tests, any set
// of kernels). The inputs an op reads on the host are the op table's, one declaration for every device.
class KernelTable {
 public:
  KernelTable() = default;
  static KernelTable of_device(Device::Kind kind);  // the op table's kernels for `kind`
  // domain "" (or "ai.onnx") is the default ONNX domain.
  void add(const std::string& domain, const std::string& op, KernelFn fn);
  void add(const std::string& op, KernelFn fn) { add("", op, fn); }
  KernelFn find(const Node& n) const;  // nullptr when missing
  bool has(const std::string& op_key) const { return fns_.count(op_key) != 0; }
  std::vector<std::string> ops() const;  // sorted op keys
  // The op's declared host-read input positions (op table), empty when none or when the op is unknown.
  const std::vector<int>& host_inputs(const std::string& op_key) const;
  bool reads_on_host(const Node& n, int input) const;

 private:
  std::unordered_map<std::string, KernelFn> fns_;
};

// The dispatch table of the CPU device: KernelTable::of_device(CPU), built once.
const KernelTable& cpu_kernels();

// Lists every node of `g` that `table` has no kernel for; throws one Error naming each op and node.
void check_supported(const Graph& g, const KernelTable& table, const std::string& where);

class KernelContext {
 public:
  virtual ~KernelContext() = default;
  const Node& node() const { return *node_; }
  int64_t opset() const { return opset_; }  // the graph's ai.onnx opset version
  int threads() const { return threads_; }  // intra-op threads this kernel may use
  Device device() const { return device_; }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[i] != nullptr; }
  const Tensor& input(int i) const;  // throws naming the node if absent
  int num_outputs() const { return static_cast<int>(node_->outputs.size()); }
  bool has_output(int i) const { return node_->has_output(static_cast<size_t>(i)); }
  // The buffer for output i; contents are undefined (not zeroed). Asking for an unused output
  // (has_output false) still returns a valid scratch buffer so kernels need not special-case it.
  virtual Tensor& output(int i, const Shape& shape, DType dtype) = 0;
  // Temporary memory valid until the kernel returns; 64-byte aligned; planned like any value.
  virtual void* scratch(size_t bytes) = 0;

  Communicator* comm() const { return comm_; }
  std::mt19937_64& rng() const { return *rng_; }

  // Asynchronous kernels (an AllReduce handed to a communication thread or stream). Only when
  // async_allowed() (the executor's async_kernels, and some node runs between this one and its
  // first reader) may a kernel return before its work is done, registering with defer() how to
  // finish it. The executor calls that completion exactly once (on the executor's thread): right
  // before the first node that reads any output of this node, else at the end of run(); an Error
  // it throws is reported naming this node. Until then the node's inputs, outputs and scratch keep
  // their memory (the planner extends their lifetimes) and no other node writes them. Otherwise a
  // kernel finishes its work before returning. At most one completion per node.
  bool async_allowed() const { return async_allowed_; }
  virtual void defer(Completion done) = 0;

 protected:
  const Node* node_ = nullptr;
  int64_t opset_ = 0;
  int threads_ = 1;
  Device device_;
  std::vector<const Tensor*> inputs_;
  Communicator* comm_ = nullptr;
  std::mt19937_64* rng_ = nullptr;
  bool async_allowed_ = false;
};

}  // namespace graphrun::runtime
