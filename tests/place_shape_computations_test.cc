// Pass place_shape_computations (graph/passes/): which shape computations of a device graph stay on
// the host, from the op table's host facts, and how a device consumer or a fetched value pulls a
// chain of them back onto the device.
#include <gtest/gtest.h>

#include "graph/passes/place_shape_computations.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::make_node;

// x -> Shape -> Gather(idx) -> Unsqueeze(axes0) -> Concat(tail) -> shp; Reshape(x, shp) -> y:
// the usual flatten of an exported model.
Graph flatten_graph() {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.values["x"] = ValueInfo{DType::F32, true, {Dim(std::string("N")), Dim(4), Dim(3)}};
  g.initializers["idx"] = Tensor::scalar<int64_t>(0);
  g.initializers["axes0"] = Tensor::from_vector<int64_t>({1}, {0});
  g.initializers["tail"] = Tensor::from_vector<int64_t>({1}, {-1});
  g.nodes.push_back(make_node("shape", "Shape", {"x"}, {"s"}));
  g.nodes.push_back(make_node("gather", "Gather", {"s", "idx"}, {"n0"}));
  g.nodes.push_back(make_node("unsqueeze", "Unsqueeze", {"n0", "axes0"}, {"n1"}));
  Node concat = make_node("concat", "Concat", {"n1", "tail"}, {"shp"});
  concat.attrs["axis"] = Attribute::Int(0);
  g.nodes.push_back(concat);
  g.nodes.push_back(make_node("reshape", "Reshape", {"x", "shp"}, {"y"}));
  return g;
}

std::vector<std::string> host_nodes(const Graph& g, const passes::HostPlacement& p) {
  std::vector<std::string> r;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (p.host_nodes[i]) r.push_back(g.nodes[i].name);
  return r;
}

TEST(PlaceShapeComputations, TheShapeChainOfAReshapeStaysOnTheHost) {
  Graph g = flatten_graph();
  passes::HostPlacement p = passes::place_shape_computations(g, {"y"});
  // Shape reads only x's metadata; Reshape reads its data (x) on the device, its shape on the host.
  EXPECT_EQ(host_nodes(g, p), (std::vector<std::string>{"shape", "gather", "unsqueeze", "concat"}));
  EXPECT_EQ(p.host_values, (std::set<std::string>{"axes0", "idx", "n0", "n1", "s", "shp", "tail"}));
}

// A fetched value stays where the executor keeps results: the Concat computing it moves to the
// device, and with it every node that only fed it; axes0 stays, since Unsqueeze reads it on the host.
TEST(PlaceShapeComputations, APinnedValuePullsItsProducersOntoTheDevice) {
  Graph g = flatten_graph();
  passes::HostPlacement p = passes::place_shape_computations(g, {"y", "shp"});
  EXPECT_TRUE(host_nodes(g, p).empty());
  EXPECT_EQ(p.host_values, (std::set<std::string>{"axes0"}));
}

// A device consumer that reads a value as data (Mul) pulls it and its producers onto the device.
TEST(PlaceShapeComputations, ADeviceConsumerOfDataPullsTheChainBack) {
  Graph g = flatten_graph();
  Node cast = make_node("cast", "Cast", {"n0"}, {"nf"});
  cast.attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::F32));
  g.nodes.push_back(cast);
  g.nodes.push_back(make_node("scale", "Mul", {"y", "nf"}, {"z"}));
  g.outputs = {"z"};
  passes::HostPlacement p = passes::place_shape_computations(g, {"z"});
  EXPECT_TRUE(host_nodes(g, p).empty()) << "Cast's output feeds a device Mul: n0, then s, go to the device";
  EXPECT_EQ(p.host_values, (std::set<std::string>{"axes0"}));
}

// Only small integer initializers are host candidates: a big one lives on the device, so the Concat
// reading it runs there, and the chain feeding that Concat with it.
TEST(PlaceShapeComputations, OnlySmallIntegerInitializersStartOnTheHost) {
  Graph g = flatten_graph();
  g.initializers["tail"] = Tensor(DType::I64, {5000});
  g.initializers["w"] = Tensor::from_vector<float>({1}, {2.f});
  passes::HostPlacement p = passes::place_shape_computations(g, {"y"});
  EXPECT_TRUE(host_nodes(g, p).empty());
  EXPECT_EQ(p.host_values, (std::set<std::string>{"axes0"}));
}

}  // namespace
}  // namespace graphrun
