// Load-time pass propagate_shape_values: the values of small int64 shape tensors (Shape, Gather,
// Concat, arithmetic), as symbolic products where ONNX's data propagation gives up. Like
// fill_reshape_dims it works on the ONNX proto during graph::load_onnx's shape inference.
#pragma once
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace graphrun::passes {

// A dimension as a product: coefficient times symbols (sorted), "4*N" for torch's N * heads. The
// model's own symbols only: ONNX's generated "unk__K" names change from one inference round to the
// next, so a product of one would claim an equality nobody proved.
struct Monomial {
  int64_t coeff = 1;
  std::vector<std::string> symbols;
  bool known() const { return symbols.empty(); }
  std::string str() const;  // "4*N", "N*T", "N" (coefficient 1 left out), or the number
  bool operator==(const Monomial& o) const { return coeff == o.coeff && symbols == o.symbols; }
};
// A dimension's size or symbol as a monomial; nothing for an unknown dimension, a generated symbol or a
// symbol that does not read as a product of positive integers and names.
std::optional<Monomial> monomial_of(const onnx::TensorShapeProto_Dimension& d);
// The dimension for `m`: a size, or a symbol named by m.str().
void set_dim(onnx::TensorShapeProto_Dimension& d, const Monomial& m);

// ONNX's data propagation (ONNX 1.12) knows Shape, Gather, Concat and some arithmetic of sizes, but a
// product of a symbol (N * heads, which torch's attention reshapes to) or a Div is unknown to it.
// This walks the nodes in order and computes those values as monomials: Shape, Constant, small int64
// initializers, Gather and Slice along axis 0, Concat, Unsqueeze, Squeeze, Identity, Cast to an
// integer type, Reshape to a vector, and Add, Sub, Mul, Div element-wise (exact: a Div that does not
// divide, a sum of different symbols or an overflow stays unknown). Adds to `shape_data` what it
// found where ONNX left an entry or an element unknown; returns whether it added anything.
bool propagate_shape_values(const onnx::ModelProto& m,
                            std::unordered_map<std::string, onnx::TensorShapeProto>& shape_data);

}  // namespace graphrun::passes
