// Pass add_metrics: appends to an inference graph what its evaluation sums over a test set — the
// number of correct predictions and the summed cross-entropy — each added into an accumulator that
// the executor keeps as state from run to run, so the totals are read once, after the last batch.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace graphrun::passes {

struct Metrics {
  std::string labels;         // the input added: int64 [N, d1..] class labels, N the scores' batch
  std::string correct_total;  // accumulators: f32 scalar initializers (zero), the totals so far
  std::string loss_total;
  // (value, accumulator) pairs for ExecOptions::state_updates: each run adds its batch's figures.
  std::vector<std::pair<std::string, std::string>> state_updates;
};

// `scores` is the graph's output of class scores f32 [N, classes, d1..] (ONNX's layout; labels
// [N, d1..]) or, with `classes_last`, [N, d1.., classes]. The count is f32 (exact up to 2^24 labels;
// the devices' ReduceSum takes f32) over every position; the loss is SoftmaxCrossEntropyLoss,
// reduction sum (over positions too).
Graph add_metrics(const Graph& g, const std::string& scores, Metrics* metrics, bool classes_last = false);

// ArgMax(scores, the class axis) == labels, counted as an f32 scalar, appended to g; returns the
// count's name.
std::string append_correct_count(Graph& g, const std::string& scores, const std::string& labels,
                                 bool classes_last = false);

// What a training step hands the host each step (runtime::HostReadback reads f32 scalars only): its
// loss and its count of correct predictions, both f32 scalars. A float64 loss (train --float64) is
// cast to f32 by a node appended to g, so the CPU, GPUs and the simulated device round it alike; the
// count is appended as append_correct_count does. `count` false (--loss mse counts nothing): `correct`
// names the f32 loss again.
struct StepFigures {
  std::string loss, correct;
};
StepFigures append_step_figures(Graph& g, const std::string& loss, const std::string& scores,
                                const std::string& labels, bool count, bool classes_last = false);

}  // namespace graphrun::passes
