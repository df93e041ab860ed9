// CPU kernels: collective family. AllReduce (ai.graphrun, docs/ops.md) packs the small gradients of its
// bucket into one buffer so that they cost one allreduce over the executor's communicator (large ones are
// summed where they lie);
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
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& g = ctx.input(i);
    GR_CHECK((g.dtype() == DType::F32 || g.dtype() == DType::F64) && g.dtype() == t,
             "input " << i << " is " << dtype_name(g.dtype()) << "; " << n.op_type << " sums f32 or f64, all of one type");
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
  // A tensor of a bucket of one, or of a million elements or more, is summed where it lies: in its output,
  // which the planner makes the gradient's own buffer where nothing reads the gradient later. The rest
  // are packed into one scratch bucket (one collective for many small tensors) and copied out after.
  constexpr int64_t kInPlace = int64_t{1} << 20;
  const int k = ctx.num_inputs();
  const size_t elem = t == DType::F64 ? sizeof(double) : sizeof(float);
  std::vector<std::pair<void*, int64_t>> own;       // summed in place: (output, count)
  std::vector<std::pair<void*, size_t>> packed;     // from the bucket: (output, bytes)
  auto in_bucket = [&](int i) { return k > 1 && ctx.input(i).numel() < kInPlace; };
  int64_t bucket = 0;
  for (int i = 0; i < k; ++i)
    if (in_bucket(i)) bucket += ctx.input(i).numel();
  char* buf = bucket ? static_cast<char*>(ctx.scratch(static_cast<size_t>(bucket) * elem)) : nullptr;
  size_t off = 0;
  for (int i = 0; i < k; ++i) {
    const Tensor& g = ctx.input(i);
    if (in_bucket(i)) {
      std::memcpy(buf + off, g.raw(), g.nbytes());
      off += g.nbytes();
    }
  }
  // Outputs only now: one may be its input's buffer, which the bucket has copied.
  for (int i = 0; i < k; ++i) {
    const Tensor& g = ctx.input(i);
    Tensor& r = ctx.output(i, g.shape(), t);
    if (in_bucket(i)) {
      packed.emplace_back(r.raw(), g.nbytes());
    } else {
      if (r.raw() != g.raw()) std::memcpy(r.raw(), g.raw(), g.nbytes());
      own.emplace_back(r.raw(), g.numel());
    }
  }
  auto unpack = [buf, packed] {
    const char* p = buf;
    for (const auto& [dst, bytes] : packed) {
      std::memcpy(dst, p, bytes);
      p += bytes;
    }
  };
  if (t == DType::F64) {  // blocking: the communicators sum f64 in their blocking call only
    for (const auto& [data, count] : own) comm->allreduce_sum_f64(static_cast<double*>(data), count);
    if (bucket) comm->allreduce_sum_f64(reinterpret_cast<double*>(buf), bucket);
    unpack();
    return;
  }
  if (!ctx.async_allowed()) {
    for (const auto& [data, count] : own) comm->allreduce_sum(static_cast<float*>(data), count);
    if (bucket) comm->allreduce_sum(reinterpret_cast<float*>(buf), bucket);
    unpack();
    return;
  }
  // The communicator's thread sums while later nodes run (every replica submits in the node's order);
  // the executor keeps the scratch bucket and the outputs untouched until this completion has copied
  // the sums out.
  std::vector<std::function<void()>> waits;
  for (const auto& [data, count] : own) waits.push_back(comm->allreduce_sum_async(static_cast<float*>(data), count));
  if (bucket) waits.push_back(comm->allreduce_sum_async(reinterpret_cast<float*>(buf), bucket));
  ctx.defer([waits = std::move(waits), unpack] {
    for (const auto& w : waits) w();
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
