// Initializers the exporter merged by value, separate again for training. torch.onnx.export in eval mode (its
// default) deduplicates initializers of equal values: a fresh model's BatchNorm running_var (ones) becomes
// Identity(its weight), running_mean Identity(its bias), every fresh LayerNorm's weight Identity(the first one's).
// Read as written, training would tie those tensors: a BatchNorm's running statistics would overwrite its scale
// and bias (which then never train), and the LayerNorms would share one weight. For training, each such Identity
// of a float initializer becomes an initializer of its own, named as the Identity's output (the exported
// parameter's name), holding the same values; inference is unchanged by it. It stays where it ties nothing (the
// initializer has no other reader) and where its output is a graph output. A tie written plainly (one initializer
// read by several nodes) is kept, except where a BatchNormalization reads it as its running mean or variance
// and another input reads it in another role (an exporter that merges equal initializers by reading one from
// several nodes, without an Identity): the statistic then gets a copy of its own, named
// `<node>.running_mean` or `<node>.running_var`. Two BatchNormalizations reading one statistic share it
// (to_training chains them).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace graphrun::passes {

// Rewrites g in place; returns the (new initializer, initializer it was an Identity of) pairs, in graph order.
std::vector<std::pair<std::string, std::string>> untie_initializers(Graph& g);

}  // namespace graphrun::passes
