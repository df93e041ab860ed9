// Train and eval forms of a forward graph: BatchNormalization with batch statistics (and running
// mean/variance outputs) or with running statistics; Dropout drawing a mask or passing through.
#pragma once
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Inference form (graph/passes/to_inference.cc): every BatchNormalization gets training_mode = 0
// and only its Y output; every Dropout loses its training_mode input and mask output (so it passes
// its input through); every ai.graphrun StopGradient becomes an Identity (the ai.graphrun opset import goes when no
// node of that domain is left). Other nodes are unchanged.
Graph to_inference(const Graph& g);
Pass to_inference_pass();

// Training form (graph/passes/to_training.cc): every BatchNormalization whose running mean and
// variance are initializers (directly or through Identity nodes, which it then reads past) gets
// training_mode = 1 and outputs running_mean/running_var (named `<mean>.updated`, `<var>.updated`
// unless present); every Dropout gets training_mode = true (an initializer input). A node already in
// training form is left as it is. Needs opset >= 14 for BatchNormalization's training_mode (raises
// the opset from 9..13 to 15, the earliest whose BatchNormalization schema both forms share).
// BatchNormalizations that update one running statistic
// (one torch module called twice exports two nodes reading the same initializers; a Gradient node
// evaluated at other values copies the nodes it differentiates) are chained in graph order (g sorted):
// each reads the running mean and variance the one before it output, as PyTorch's successive calls
// update them, and the last one's outputs are persisted. to_inference undoes the chain.
Graph to_training(const Graph& g);
Pass to_training_pass();

// PyTorch's running variance (graph/passes/unbiased_running_var.cc): after every training-mode
// BatchNormalization whose running variance is an initializer, nodes that turn the op's running_var
// output (ONNX's: the biased batch variance) into PyTorch's (the unbiased one, times n/(n-1)); the
// last is named unbiased_running_var_node(bn) and its output is what the state update persists.
// BatchNormalizations that sync_batchnorm rewrote are gone and keep their own unbiased statistics.
Graph unbiased_running_var(const Graph& g);
Pass unbiased_running_var_pass();
std::string unbiased_running_var_node(const Node& bn);

// The (running statistic output, initializer) pairs of a training-form graph: what the executor's
// state_updates must persist after each step (the running variance corrected, when it is); of a chain
// (to_training), its last node's.
std::vector<std::pair<std::string, std::string>> batchnorm_state_updates(const Graph& g);

// Every value of g (sorted) that holds a BatchNormalization's running mean or variance, mapped to the
// initializer it updates: the initializers the nodes read as input 3 or 4, the running_mean and
// running_var outputs of the training-mode ones reading such a value (a chain, to_training), and the
// corrections of unbiased_running_var. FusedBatchNormalization counts as BatchNormalization.
std::map<std::string, std::string> running_stat_initializers(const Graph& g);
bool is_batchnorm(const Node& n);  // BatchNormalization, or the executor's FusedBatchNormalization

// v and the values it is a standard Identity of, in order, back to the first one no Identity produces (an
// initializer, an input, another op's output): how an exporter's Identity nodes before a running statistic are read
// past. `producers` is g.producers().
std::vector<std::string> identity_chain(const Graph& g, const std::string& v,
                                        const std::unordered_map<std::string, int>& producers);

}  // namespace graphrun::passes
