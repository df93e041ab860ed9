// graphrun grad: writes the model's forward + loss + backward graph as an ONNX model whose outputs are
// the loss and one <parameter>_grad per trainable parameter.
#include <algorithm>
#include <iostream>

#include "graph/onnx_io.h"
#include "graph/passes/train_mode.h"
#include "runtime/pipeline.h"
#include "tools/backward_options.h"
#include "tools/cli.h"
#include "tools/optimizer_options.h"

namespace graphrun::cli {

namespace {

const Command& grad_command() {
  static const Command cmd = [] {
    Command c{"grad",
              "graphrun grad MODEL.onnx [-o OUT.onnx] [--loss cross-entropy|mse|output] [--freeze NAMES] [--loss-output NAME]",
              "Writes forward + loss + backward as one ONNX model: its inputs are the model's inputs plus 'labels'\n"
              "(none with --loss output: the loss is the mean of the model's own output --loss-output),\n"
              "its outputs the model's outputs, 'loss' (scalar, mean over the batch) and one '<parameter>_grad'\n"
              "per trainable parameter (every float initializer but --freeze'd ones, BatchNorm statistics and\n"
              "those the model's metadata_props 'graphrun.frozen' names: torch's buffers, see the README).",
              {{"output", "FILE", "where to write the model (also -o FILE; default: MODEL.grad.onnx here); weights\n"
                                  "                            in FILE.data beside it when the model had external data"}},
              "The gradient model passes onnx.checker (full check) and runs with graphrun run; graphrun's own\n"
              "ops (ConvGrad, MaxPoolGrad, ...) are in the domain ai.graphrun, see docs/ops.md. The graph is what\n"
              "the pipeline of `graphrun train` makes of the model up to its backward pass (with --devices: all\n"
              "of it); `graphrun show MODEL --backward --passes` lists those passes.\n"
              "\n"
              "examples:\n"
              "  graphrun grad models/lenet.onnx -o lenet.grad.onnx\n"
              "  graphrun grad models/resnet18.onnx --freeze conv1.weight -o r.grad.onnx\n"
              "  graphrun run lenet.grad.onnx --input image=x.npy --input labels=y.npy --output-dir g/"};
    for (const auto& o : backward_options()) c.options.push_back(o);
    c.options.push_back({"devices", "N", "write the data-parallel training graph of N CPU replicas instead: replica\n"
                                         "                            0's graph (all replicas run the same one), with its\n"
                                         "                            AllReduce and SGD update nodes; inputs add lr and loss_scale"});
    for (const auto& o : optimizer_options()) c.options.push_back(o);
    c.options.push_back(dump_after_option());
    c.options.push_back(sync_bn_option());
    return c;
  }();
  return cmd;
}

std::string default_output(const std::string& model) {
  std::string base = model.substr(model.find_last_of('/') == std::string::npos ? 0 : model.find_last_of('/') + 1);
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".onnx") == 0) base.resize(base.size() - 5);
  return base + ".grad.onnx";
}

// The step's new state as outputs named `<initializer>.new` (BatchNorm's running statistics were
// outputs under internal names, or, for the running mean, not at all): an Identity node names each
// value the executor would persist, and the value leaves the outputs under its old name.
Graph name_state_outputs(Graph g, const std::vector<std::pair<std::string, std::string>>& updates) {
  for (const auto& [value, init] : updates) {
    if (value == init + ".new") continue;
    const std::string name = g.unique_name(init + ".new");
    g.add_node(Node{g.unique_name("state_" + init), "Identity", "", {value}, {name}, {}});
    if (const ValueInfo* vi = g.info(value)) g.values[name] = *vi;
    g.outputs.erase(std::remove(g.outputs.begin(), g.outputs.end(), value), g.outputs.end());
    g.outputs.push_back(name);
  }
  return g;
}

}  // namespace

int cmd_grad(const std::vector<std::string>& argv) {
  const Command& cmd = grad_command();
  Args args(cmd, argv);
  if (args.help()) {
    std::cout << cmd.help();
    return 0;
  }
  if (args.positional().size() != 1)
    throw Error(args.usage_error(args.positional().empty() ? "no model given"
                                                           : "expected one model file, got " +
                                                                 std::to_string(args.positional().size())));
  const std::string model = args.positional()[0];
  runtime::PipelineOptions po = parse_pipeline_options(args, args.has("devices"));
  po.dump = &std::cout;
  check_distinct_paths({{"the model", model}}, {{"--output", args.get("output", default_output(model))}});
  check_output_path("--output", args.get("output", default_output(model)));
  const runtime::TrainingGraphs tg = runtime::build_training_graphs(load_onnx_for_training(model), po);
  const Graph g = po.data_parallel ? name_state_outputs(tg.replicas[0].graph, tg.replicas[0].state_updates)
                                    : name_state_outputs(tg.training, passes::batchnorm_state_updates(tg.training));
  const std::string out = args.get("output", default_output(model));
  save_onnx(g, out, true);
  int grads = 0;
  for (const auto& o : g.outputs) grads += o.size() > 5 && o.compare(o.size() - 5, 5, "_grad") == 0;
  if (args.has("devices")) {
    int allreduce = 0;
    for (const auto& n : g.nodes) allreduce += n.op_type == "AllReduce";
    std::cout << "wrote " << out << ": replica 0 of " << args.get("devices") << ", " << g.nodes.size() << " nodes, "
              << allreduce << " AllReduce\n";
    return 0;
  }
  std::cout << "wrote " << out << ": " << g.nodes.size() << " nodes; outputs loss and " << grads << " gradients\n";
  return 0;
}

}  // namespace graphrun::cli
