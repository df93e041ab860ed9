// graphrun show: prints a model (or a graph derived from it) as text, one node a line, or as Graphviz
// dot; or the pipeline of passes that derives it.
#include <iostream>
#include <sstream>

#include "graph/atomic_file.h"
#include "graph/onnx_io.h"
#include "graph/printer.h"
#include "runtime/pipeline.h"
#include "runtime/trainer.h"
#include "tools/backward_options.h"
#include "tools/cli.h"
#include "tools/optimizer_options.h"

namespace graphrun::cli {

namespace {

// The options of `show`. The graph transforms (--backward, --devices) choose the pipeline in
// pipeline_of; the options that shape it are backward_options and optimizer_options.
std::vector<Option> show_options() {
  std::vector<Option> r = {
      {"format", "FMT", "text (default) or dot (Graphviz)"},
      {"output", "FILE", "write to FILE instead of stdout (also -o FILE)"},
      {"backward", "", "show forward + loss + backward (the graph `graphrun grad` writes)"},
      {"devices", "N", "the per-device training graph of N CPU replicas (or cpu:0,cpu:1): forward, loss,\n"
                       "                            backward, AllReduce and SGD nodes (every replica runs the same graph;\n"
                       "                            it holds the backward graph, with or without --backward)"},
      {"passes", "", "print the pipeline instead of a graph: one line per pass (name, options, what it\n"
                     "                            does); that of graphrun train, or with --backward that of graphrun grad"},
      dump_after_option(),
      sync_bn_option(),
  };
  for (const auto& o : backward_options()) r.push_back(o);
  for (const auto& o : optimizer_options()) r.push_back(o);
  return r;
}

const Command& show_command() {
  static const Command cmd{
      "show",
      "graphrun show MODEL.onnx [--format text|dot] [-o FILE] [--backward] [--devices N] [--passes | --dump-after PASS]",
      "Prints a model: its inputs, parameters, one node a line with dtypes and shapes, and its outputs.",
      show_options(),
      "--backward and --devices print what the pipeline of passes makes of the model (the graph of\n"
      "graphrun grad, and of grad/train --devices N); --passes lists that pipeline, and --dump-after PASS\n"
      "prints the graph after one of its passes instead of the last. Without --backward or --devices,\n"
      "--passes and --dump-after refer to the pipeline of graphrun train, which ends with the executor's\n"
      "own passes (fold_constants, remove_internal_noops, fuse_relu_grad, fuse_relu_epilogue,\n"
      "fold_transposes, fuse_relu_bn_add, fuse_pool_relu_grad, recompute_maxpool_argmax: the graph\n"
      "train's replicas run;\n"
      "--devices N prints and grad exports the standard graph before them;\n"
      "GRAPHRUN_SKIP_PASSES=NAME[,NAME] leaves some of them out, in show and train alike).\n"
      "\n"
      "examples:\n"
      "  graphrun show models/lenet.onnx\n"
      "  graphrun show models/lenet.onnx --backward --freeze conv1.weight\n"
      "  graphrun show models/lenet.onnx --format dot -o lenet.dot && dot -Tsvg lenet.dot > lenet.svg\n"
      "  graphrun show models/lenet.onnx --passes --devices 2 --optimizer adam\n"
      "  graphrun show models/lenet.onnx --backward --dump-after attach_loss\n"
      "  graphrun show models/lenet.onnx --dump-after fuse_relu_grad"};
  return cmd;
}

bool transforms(const Args& args) {
  return args.has("backward") || args.has("devices") || args.has("passes") || args.has("dump-after");
}

// The pipeline options of the graph to show: grad's pipeline with --backward alone, otherwise the
// data-parallel one (show --devices N, and train's for --passes / --dump-after).
runtime::PipelineOptions pipeline_of(const Args& args) {
  runtime::PipelineOptions po = parse_pipeline_options(args, args.has("devices") || !args.has("backward"));
  // train's pipeline ends with the executor's passes; the graph `show --devices N` prints is the exported one.
  po.executor_passes = po.data_parallel && (args.has("passes") || args.has("dump-after"));
  return po;
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
  if (args.has("passes") && (args.has("dump-after") || format != "text"))
    throw Error(args.usage_error("--passes prints the pipeline as text; it takes no --dump-after or --format dot"));
  for (const char* o : {"loss", "freeze", "loss-output", "label-smoothing", "sync-bn"})
    if (args.has(o) && !transforms(args))
      throw Error(args.usage_error("--" + std::string(o) + " needs --backward, --devices, --passes or --dump-after"));
  // Bad values fail before the model loads.
  runtime::PipelineOptions po;
  if (transforms(args)) po = pipeline_of(args);
  else parse_optimizer_options(args, false);

  if (args.has("output")) {
    check_distinct_paths({{"the model", args.positional()[0]}}, {{"--output", args.get("output")}});
    check_output_path("--output", args.get("output"));
  }
  Graph g = transforms(args) ? load_onnx_for_training(args.positional()[0]) : load_onnx(args.positional()[0]);
  std::string text;
  if (args.has("passes")) {
    text = "# the passes of graphrun " +
           std::string(po.data_parallel ? "train (grad/show --devices N stop before its executor-only passes)"
                                           : "grad (and of show --backward)") +
           ", in order" + (po.data_parallel ? "; then one copy of the graph per replica" : "") + "\n" +
           runtime::training_pipeline(g, po).listing();
  } else if (args.has("dump-after")) {
    g = runtime::training_pipeline(g, po).until(po.dump_after).run(g);
    std::ostringstream os;
    if (format == "dot") {
      infer_shapes(g);
      os << print_dot(g);
    } else {
      passes::dump_graph(os, po.dump_after, g);
    }
    text = os.str();
  } else {
    if (transforms(args)) {
      const runtime::TrainingGraphs tg = runtime::build_training_graphs(g, po);
      g = po.data_parallel ? tg.replicas[0].graph : tg.training;
    }
    infer_shapes(g);  // values the passes added get their dtypes and shapes for printing
    text = format == "dot" ? print_dot(g) : print_text(g);
    if (args.has("devices") && format == "text")
      text = "# device graph of replica 0 of " + runtime::devices_str(po.devices) +
             "; every replica runs this same graph, its AllReduce nodes summing over all of them\n" + text;
  }

  if (!args.has("output")) {
    std::cout << text;
    return 0;
  }
  write_file_atomically(args.get("output"), text);  // whole or not at all; one line naming the file and why
  return 0;
}

}  // namespace graphrun::cli
