// graphrun show: prints a model (or a graph derived from it) as text, one node a line, or as Graphviz dot.
#include <fstream>
#include <iostream>

#include "graph/onnx_io.h"
#include "graph/printer.h"
#include "tools/cli.h"

namespace graphrun::cli {

namespace {

// The options of `show`. Graph transforms (--backward, --devices) add theirs here and handle them
// in graph_to_show.
std::vector<Option> show_options() {
  return {
      {"format", "FMT", "text (default) or dot (Graphviz)"},
      {"output", "FILE", "write to FILE instead of stdout (also -o FILE)"},
  };
}

const Command& show_command() {
  static const Command cmd{
      "show",
      "graphrun show MODEL.onnx [--format text|dot] [-o FILE]",
      "Prints a model: its inputs, parameters, one node a line with dtypes and shapes, and its outputs.",
      show_options(),
      "examples:\n"
      "  graphrun show models/lenet.onnx\n"
      "  graphrun show models/lenet.onnx --format dot -o lenet.dot && dot -Tsvg lenet.dot > lenet.svg"};
  return cmd;
}

// The graph to print: the model as loaded, or what the transform options make of it. Each transform
// is a Graph -> Graph step applied here, in order.
Graph graph_to_show(const Args& args, Graph g) {
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

  Graph g = graph_to_show(args, load_onnx(args.positional()[0]));
  const std::string text = format == "dot" ? print_dot(g) : print_text(g);

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
