// Pass bucket_allreduce: data-parallel replicas sum their parameter gradients through AllReduce
// nodes, the gradients grouped in buckets in the order the backward pass produces them.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

struct BucketAllReduceOptions {
  // The parameters whose gradients (graph outputs `<param><grad_suffix>`) are summed; empty: every
  // output `<name><grad_suffix>` where <name> is an initializer (what the backward pass emits).
  std::vector<std::string> params;
  std::string grad_suffix = "_grad";
  // A bucket closes once it holds at least this many bytes (as DDP's bucket_cap_mb).
  size_t bucket_bytes = size_t(4) << 20;
};

// One ai.graphrun AllReduce (reduction "sum") per bucket, named allreduce_<b>, standing right after
// the node that produces the bucket's last gradient (so an asynchronous AllReduce overlaps the rest
// of the backward pass); its outputs are the sums `<grad>.sum`. The gradients stay graph outputs.
// A bucket holds gradients of one type (f32 or f64: a float64 model, `train --float64`). Error when a
// parameter is not an f32 or f64 initializer or has no gradient output.
Graph bucket_allreduce(const Graph& g, const BucketAllReduceOptions& opts);
Pass bucket_allreduce_pass(const BucketAllReduceOptions& opts);

// The parameters whose gradient is an output of g (`<initializer><grad_suffix>`), in output order.
std::vector<std::string> gradient_params(const Graph& g, const std::string& grad_suffix = "_grad");

// A gradient an AllReduce node of g sums: the parameter, its gradient, and the sum.
struct ReducedGradient {
  std::string param, grad, sum;
};
// The AllReduce nodes of g in graph order (bucket 0 first), each as its gradients.
std::vector<std::vector<ReducedGradient>> reduced_gradients(const Graph& g, const std::string& grad_suffix = "_grad");

}  // namespace graphrun::passes
