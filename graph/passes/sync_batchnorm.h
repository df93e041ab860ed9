// Pass sync_batchnorm (--sync-bn): training-mode BatchNormalization over the global batch of all
// replicas, as PyTorch's SyncBatchNorm, written out as graph nodes around ReplicaSum collectives.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Every BatchNormalization in training mode (after to_training) becomes, for X of shape [N, C, ...]
// viewed as [N, C, L]:
//   s1, n   = ReduceSum(X) over N and L, the replica's element count per channel
//   S1, Nt  = ReplicaSum(s1, n)                mean = S1 / Nt
//   S2      = ReplicaSum(ReduceSum((X - mean)^2))   var = S2 / Nt   (two passes: no cancellation)
//   Y       = (X - mean) * scale / sqrt(var + epsilon) + B
//   running_mean' = running_mean * momentum + mean * (1 - momentum)
//   running_var'  = running_var * momentum + var * Nt / max(Nt - 1, 1) * (1 - momentum)
// so shards of different sizes weigh by their counts and every replica computes the same statistics
// (the running ones included: PyTorch's unbiased running variance, over the global count, as the
// BatchNormalization kernel keeps it over one replica's). Autodiff differentiates the nodes; the
// gradient of a ReplicaSum is the ReplicaSum of its output gradients, which yields SyncBatchNorm's
// two backward reductions (sum of dy and of dy * (x - mean)). The running statistics are recorded in
// Graph::state_updates (of nodes chained on one statistic, to_training, the last one's). On one replica (or without a
// communicator) ReplicaSum is the identity, and the result is BatchNormalization's up to float rounding.
Graph sync_batchnorm(const Graph& g);
Pass sync_batchnorm_pass();

}  // namespace graphrun::passes
