// graphrun show: prints a model (or a graph derived from it) as text, one node a line, or as Graphviz dot.
#include <fstream>
#include <iostream>

#include "graph/onnx_io.h"
#include "graph/printer.h"
#include "runtime/trainer.h"
#include "tools/backward_options.h"
#include "tools/cli.h"

namespace graphrun::cli {

namespace {

// The options of `show`. Graph transforms (--backward, --devices) add theirs here and handle them
// in graph_to_show.
std::vector<Option> show_options() {
  std::vector<Option> r = {
      {"format", "FMT", "text (default) or dot (Graphviz)"},
      {"output", "FILE", "write to FILE instead of stdout (also -o FILE)"},
      {"backward", "", "show forward + loss + backward (the graph `graphrun grad` writes)"},
      {"devices", "N", "the per-device training graph of N CPU replicas (or cpu:0,cpu:1): forward, loss,\n"
                       "                            backward, AllReduce and SGD nodes (every replica runs the same graph)"},
  };
  for (const auto& o : backward_options()) r.push_back(o);
  return r;
}

const Command& show_command() {
  static const Command cmd{
      "show",
      "graphrun show MODEL.onnx [--format text|dot] [-o FILE] [--backward [--loss KIND] [--freeze NAMES]]",
      "Prints a model: its inputs, parameters, one node a line with dtypes and shapes, and its outputs.",
      show_options(),
      "examples:\n"
      "  graphrun show models/lenet.onnx\n"
      "  graphrun show models/lenet.onnx --backward --freeze conv1.weight\n"
      "  graphrun show models/lenet.onnx --format dot -o lenet.dot && dot -Tsvg lenet.dot > lenet.svg"};
  return cmd;
}

// The graph to print: the model as loaded, or what the transform options make of it. Each transform
// is a Graph -> Graph step applied here, in order (e.g. --backward, then --devices).
Graph graph_to_show(const Args& args, Graph g) {
  if (args.has("devices")) {
    runtime::PipelineOptions po;
    try {
      po.devices = runtime::parse_devices(args.get("devices"));
    } catch (const Error& e) {
      throw Error(args.usage_error(std::string("--devices: ") + e.what()));
    }
    po.output = args.get("loss-output");
    if (args.get("loss", "cross-entropy") == "mse") po.loss = autodiff::LossKind::MSE;
    for (const auto& f : args.all("freeze")) po.freeze.insert(f);
    g = runtime::build_training_graphs(g, po).replicas[0].graph;
  } else if (args.has("backward")) {
    g = build_backward_graph(g, parse_backward_options(args));
  }
  // Values a transform added get their dtypes and shapes for printing.
  infer_shapes(g);
  return g;
}

}  // namespace

int cmd_show(const std::vector<std::string>& argv) {
  const Command& cmd = show_command();
  Args args(cmd, argv);
  if (args.help()) {
    std::cout << cmd.help();
    return 0;
  }
  if (args.positional().size() != 1)
    throw Error(args.usage_error(args.positional().empty() ? "no model given" : "expected one model file, got " +
                                                                                    std::to_string(args.positional().size())));
  const std::string format = args.get("format", "text");
  if (format != "text" && format != "dot")
    throw Error(args.usage_error("--format must be text or dot, got '" + format + "'"));

  for (const char* o : {"loss", "freeze", "loss-output"})
    if (args.has(o) && !args.has("backward") && !args.has("devices"))
      throw Error(args.usage_error("--" + std::string(o) + " needs --backward or --devices"));
  if (args.has("backward") || args.has("devices")) parse_backward_options(args);  // bad values fail before the model loads

  Graph g = graph_to_show(args, load_onnx(args.positional()[0]));
  std::string text = format == "dot" ? print_dot(g) : print_text(g);
  if (args.has("devices") && format == "text")
    text = "# device graph of replica 0 of " + runtime::devices_str(runtime::parse_devices(args.get("devices"))) +
           "; every replica runs this same graph, its AllReduce nodes summing over all of them\n" + text;

  if (!args.has("output")) {
    std::cout << text;
    return 0;
  }
  const std::string path = args.get("output");
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  GR_CHECK(f, path << ": cannot open for writing");
  f << text;
  f.close();
  GR_CHECK(f, path << ": write error");
  return 0;
}

}  // namespace graphrun::cli
