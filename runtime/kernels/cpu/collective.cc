// CPU kernels: collective family. AllReduce (ai.graphrun, docs/ops.md) packs its bucket of
// gradients into one buffer so the whole bucket costs one allreduce over the executor's communicator;
// where the executor allows it, the allreduce finishes asynchronously (overlapping later nodes).
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

namespace {

void all_reduce(KernelContext& ctx) {
  const Node& n = ctx.node();
  std::string reduction = n.attr_s("reduction", "sum");
  GR_CHECK(reduction == "sum", "reduction '" << reduction << "' is not supported (only \"sum\")");
  GR_CHECK(ctx.num_inputs() == ctx.num_outputs(),
           "has " << ctx.num_inputs() << " inputs but " << ctx.num_outputs() << " outputs (they pair up)");
  // One buffer of one type: f32, or f64 (a float64 model, `graphrun train --float64`).
  const DType t = ctx.num_inputs() > 0 ? ctx.input(0).dtype() : DType::F32;
  int64_t total = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& g = ctx.input(i);
    GR_CHECK((g.dtype() == DType::F32 || g.dtype() == DType::F64) && g.dtype() == t,
             "input " << i << " is " << dtype_name(g.dtype()) << "; " << n.op_type << " sums f32 or f64, all of one type");
    total += g.numel();
  }
  // Without a communicator the node runs in a group of one (e.g. `graphrun run` on an exported
  // device graph): the sum over one replica is the input itself.
  Communicator* comm = ctx.comm();
  if (!comm || comm->size() == 1) {
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& g = ctx.input(i);
      Tensor& r = ctx.output(i, g.shape(), t);
      if (r.raw() != g.raw()) std::memcpy(r.raw(), g.raw(), g.nbytes());
    }
    return;
  }
  if (ctx.num_inputs() == 1) {
    // One tensor (a bucket of one, as every tensor over the bucket size is): summed in its output, which the
    // planner makes the gradient's own buffer where nothing reads the gradient later. No bucket copy.
    const Tensor& g = ctx.input(0);
    Tensor& r = ctx.output(0, g.shape(), t);
    if (r.raw() != g.raw()) std::memcpy(r.raw(), g.raw(), g.nbytes());
    if (t == DType::F64) return comm->allreduce_sum_f64(r.data<double>(), total);
    if (!ctx.async_allowed()) return comm->allreduce_sum(r.data<float>(), total);
    std::function<void()> wait = comm->allreduce_sum_async(r.data<float>(), total);
    ctx.defer(std::move(wait));
    return;
  }
  const size_t elem = t == DType::F64 ? sizeof(double) : sizeof(float);
  char* buf = static_cast<char*>(ctx.scratch(static_cast<size_t>(total) * elem));
  size_t off = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& g = ctx.input(i);
    std::memcpy(buf + off, g.raw(), g.nbytes());
    off += g.nbytes();
  }
  // Where each output's values sit in the bucket; copied out once the sum is done.
  std::vector<std::pair<void*, size_t>> outs;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& g = ctx.input(i);
    outs.emplace_back(ctx.output(i, g.shape(), t).raw(), g.nbytes());
  }
  auto unpack = [buf, outs] {
    const char* p = buf;
    for (const auto& [dst, bytes] : outs) {
      std::memcpy(dst, p, bytes);
      p += bytes;
    }
  };
  if (t == DType::F64) {  // blocking: the communicators sum f64 in their blocking call only
    comm->allreduce_sum_f64(reinterpret_cast<double*>(buf), total);
    unpack();
    return;
  }
  if (!ctx.async_allowed()) {
    comm->allreduce_sum(reinterpret_cast<float*>(buf), total);
    unpack();
    return;
  }
  // The communicator's thread sums the bucket while later nodes run; the executor keeps the
  // scratch bucket and the outputs untouched until this completion has copied the sums out.
  std::function<void()> wait = comm->allreduce_sum_async(reinterpret_cast<float*>(buf), total);
  ctx.defer([wait = std::move(wait), unpack] {
    wait();
    unpack();
  });
}

}  // namespace

GR_REGISTER_OPS(collective) {
  const auto variadic = OpSchemaSpec::Arity::Variadic;
  ops.op(kGraphrunDomain, "AllReduce")
      .cpu(all_reduce)
      .schema(OpSchemaSpec("each Ri is the sum over all replicas of Gi; one node carries a bucket of gradients")
                  .attr("reduction", "only \"sum\"", Attribute::Str("sum"))
                  .input("G", "gradients of this replica", "T", variadic)
                  .output("R", "sums over the replicas", "T", variadic)
                  .type("T", numeric_tensor_types(), "numeric tensors")
                  .outputs_like_inputs());
  // The same sum, in the forward pass (graph/passes/sync_batchnorm.cc): its own op, because the
  // trainer's gradient buckets are the AllReduce nodes, and because it has a gradient.
  ops.op(kGraphrunDomain, "ReplicaSum")
      .cpu(all_reduce)
      .schema(OpSchemaSpec("each Ri is the sum over all replicas of Xi (SyncBatchNorm's statistics); the identity "
                           "on one replica")
                  .input("X", "this replica's values", "T", variadic)
                  .output("R", "sums over the replicas", "T", variadic)
                  .type("T", float_tensor_types(), "float tensors")
                  .outputs_like_inputs());
}

}  // namespace graphrun::runtime::cpu
