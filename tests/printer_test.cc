// Text and Graphviz printers: exact lines for a small graph; dot output accepted by Graphviz's `dot`.
#include <gtest/gtest.h>

#include <fstream>

#include "graph/printer.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

ValueInfo f32(std::vector<Dim> dims) {
  ValueInfo v;
  v.dtype = DType::F32;
  v.has_shape = true;
  v.shape = std::move(dims);
  return v;
}

Node make_node(std::string name, std::string op, std::vector<std::string> in, std::vector<std::string> out,
               std::string domain = "") {
  Node n;
  n.name = std::move(name);
  n.op_type = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.domain = std::move(domain);
  return n;
}

// Conv -> Relu -> ConvGrad-style node with several outputs, an absent input and a quoted name.
Graph sample_graph() {
  Graph g;
  g.name = "lenet";
  g.opsets[""] = 17;
  g.opsets[kGraphrunDomain] = 1;
  const Dim N(std::string("N"));
  g.inputs = {"image"};
  g.values["image"] = f32({N, 1, 28, 28});
  g.initializers["conv1.weight"] = Tensor(DType::F32, {20, 1, 3, 3});
  g.initializers["conv1.bias"] = Tensor(DType::F32, {20});
  g.values["conv1.weight"] = f32({20, 1, 3, 3});
  g.values["conv1.bias"] = f32({20});
  Node conv = make_node("conv1", "Conv", {"image", "conv1.weight", "conv1.bias"}, {"conv1"});
  conv.attrs["kernel_shape"] = Attribute::Ints({3, 3});
  conv.attrs["pads"] = Attribute::Ints({0, 0, 0, 0});
  g.add_node(conv);
  g.values["conv1"] = f32({N, 20, 26, 26});
  g.add_node(make_node("relu1", "Relu", {"conv1"}, {"relu1"}));
  g.values["relu1"] = f32({N, 20, 26, 26});
  Node grad = make_node("conv1_grad", "ConvGrad", {"relu1", "image", "conv1.weight"}, {"", "dW", "dB"}, kGraphrunDomain);
  g.add_node(grad);
  g.values["dW"] = f32({20, 1, 3, 3});
  g.add_node(make_node("clip", "Clip", {"relu1", "", "conv1.bias"}, {"say \"hi\""}));
  g.outputs = {"relu1", "dW", "dB", "say \"hi\""};
  return g;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> r;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l)) r.push_back(l);
  return r;
}

bool has_line(const std::vector<std::string>& ls, const std::string& want) {
  for (const auto& l : ls)
    if (l == want) return true;
  return false;
}

TEST(Printer, TextHasOneNodeALineWithTypes) {
  std::string text = print_text(sample_graph());
  auto ls = lines(text);
  ASSERT_FALSE(ls.empty());
  EXPECT_EQ(ls[0], "graph lenet (ai.onnx v17, ai.graphrun v1)");
  EXPECT_TRUE(has_line(ls, "  %image: f32[N,1,28,28]")) << text;
  EXPECT_TRUE(has_line(ls, "  %conv1.weight: f32[20,1,3,3]")) << text;
  EXPECT_TRUE(has_line(ls, "  (2 parameters, 200 values, 800 B)")) << text;
  EXPECT_TRUE(has_line(ls, "  %conv1: f32[N,20,26,26] = Conv(%image, %conv1.weight, %conv1.bias) "
                           "{kernel_shape=[3,3], pads=[0,0,0,0]}")) << text;
  EXPECT_TRUE(has_line(ls, "  %relu1: f32[N,20,26,26] = Relu(%conv1)")) << text;
  EXPECT_TRUE(has_line(ls, "  _, %dW: f32[20,1,3,3], %dB = ai.graphrun.ConvGrad(%relu1, %image, %conv1.weight)"
                           "  # conv1_grad")) << text;
  EXPECT_TRUE(has_line(ls, "  %say \"hi\" = Clip(%relu1, _, %conv1.bias)  # clip")) << text;
  // Sections in order: inputs, parameters, nodes, outputs (last).
  size_t in = text.find("inputs:"), par = text.find("parameters:"), nod = text.find("nodes:"), out = text.find("outputs:");
  EXPECT_TRUE(in < par && par < nod && nod < out) << text;
  EXPECT_EQ(ls.back(), "  %say \"hi\"");
}

TEST(Printer, DotIsValidGraphviz) {
  Graph g = sample_graph();
  std::string dot = print_dot(g);
  EXPECT_NE(dot.find("shape=note"), std::string::npos);  // parameters look different from nodes
  EXPECT_NE(dot.find("label=\"ai.graphrun.ConvGrad\\nconv1_grad\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("f32[N,20,26,26]"), std::string::npos);
  std::string dir = testing::temp_dir("printer_dot");
  std::ofstream(dir + "/g.dot") << dot;
  auto r = testing::run_command("dot -Tsvg '" + dir + "/g.dot' -o '" + dir + "/g.svg'");
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << dot;
  EXPECT_TRUE(r.output.empty()) << r.output;  // no warnings either
  // An input nobody produces (an invalid graph) is still drawn, not crashed on.
  g.nodes[1].inputs[0] = "ghost";
  std::ofstream(dir + "/h.dot") << print_dot(g);
  EXPECT_EQ(testing::run_command("dot -Tsvg '" + dir + "/h.dot' -o /dev/null").exit_code, 0);
}

// A newline in a name (a model file may hold any bytes in one) split a node over two lines of
// `graphrun show`; control characters are escaped in the text view, as the dot view and messages escape them.
TEST(Printer, ControlCharactersInNamesStayOnTheirLine) {
  Graph g;
  g.name = "g\nx";
  g.opsets[""] = 17;
  g.inputs = {"xline1\nline2"};
  g.values["xline1\nline2"] = f32({Dim("N"), 4});
  Node relu = make_node("relu\r\n", "Relu", {"xline1\nline2"}, {"y\ty"});
  relu.attrs["note"] = Attribute::Str("a\nb");
  g.add_node(relu);
  g.values["y\ty"] = f32({Dim("N"), 4});
  g.outputs = {"y\ty"};
  const std::string text = print_text(g);
  EXPECT_EQ(text,
            "graph g\\nx (ai.onnx v17)\n"
            "inputs:\n"
            "  %xline1\\nline2: f32[N,4]\n"
            "nodes:\n"
            "  %y\\x09y: f32[N,4] = Relu(%xline1\\nline2) {note=\"a\\nb\"}  # relu\\x0d\\n\n"
            "outputs:\n"
            "  %y\\x09y: f32[N,4]\n");
}

TEST(Printer, EmptyGraph) {
  Graph g;
  EXPECT_EQ(print_text(g), "graph graph\ninputs:\nnodes:\noutputs:\n");
  EXPECT_NE(print_dot(g).find("digraph"), std::string::npos);
}

}  // namespace
}  // namespace graphrun
