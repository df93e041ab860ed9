// graph/float64.h: the float64 copy of a model.
#include "graph/float64.h"

namespace graphrun {

namespace {

Tensor to_f64(const Tensor& t) { return Tensor::from_vector<double>(t.shape(), t.as_doubles()); }

}  // namespace

Graph float64_copy(const Graph& g, bool fixed_random) {
  Graph d = g;
  for (auto& [name, t] : d.initializers)
    if (t.dtype() == DType::F32) t = to_f64(t);
  for (auto& [name, vi] : d.values)
    if (vi.dtype == DType::F32) vi.dtype = DType::F64;
  const auto f32 = static_cast<int64_t>(DType::F32), f64 = static_cast<int64_t>(DType::F64);
  for (Node& n : d.nodes) {
    if (!n.domain.empty() && n.domain != "ai.onnx") continue;
    for (auto& [key, a] : n.attrs)
      if (a.kind == Attribute::Kind::Tensor && a.t.dtype() == DType::F32) a = Attribute::Tens(to_f64(a.t));
    if ((n.op_type == "Cast" || n.op_type == "RandomNormalLike" || n.op_type == "RandomUniformLike" ||
         n.op_type == "EyeLike") && n.attr_i(n.op_type == "Cast" ? "to" : "dtype", 0) == f32)
      n.attrs[n.op_type == "Cast" ? "to" : "dtype"] = Attribute::Int(f64);
    if (n.op_type == "Constant" && n.has_attr("value_float")) {
      n.attrs["value"] = Attribute::Tens(Tensor::scalar<double>(n.attr_f("value_float", 0)));
      n.attrs.erase("value_float");
    }
    if (n.op_type == "Constant" && n.has_attr("value_floats")) {
      const auto& fs = n.attr("value_floats")->floats;
      n.attrs["value"] = Attribute::Tens(Tensor::from_vector<double>({static_cast<int64_t>(fs.size())},
                                                                     std::vector<double>(fs.begin(), fs.end())));
      n.attrs.erase("value_floats");
    }
    if (n.op_type == "LayerNormalization") n.attrs["stash_type"] = Attribute::Int(f64);
    if (n.op_type == "MelWeightMatrix" && n.attr_i("output_datatype", f32) == f32)
      n.attrs["output_datatype"] = Attribute::Int(f64);
    // Fixed: the same mask and noise at every run (the random ops' seed is a float in ONNX).
    const bool random = n.op_type == "RandomNormal" || n.op_type == "RandomUniform" || n.op_type == "RandomNormalLike" ||
                        n.op_type == "RandomUniformLike" || n.op_type == "Bernoulli";
    if (fixed_random && n.op_type == "Dropout" && !n.has_attr("seed")) n.attrs["seed"] = Attribute::Int(1);
    if (fixed_random && random && !n.has_attr("seed")) n.attrs["seed"] = Attribute::Float(1.f);
    // RandomNormal and RandomUniform without a dtype mean float.
    if ((n.op_type == "RandomNormal" || n.op_type == "RandomUniform") && n.attr_i("dtype", f32) == f32)
      n.attrs["dtype"] = Attribute::Int(f64);
  }
  if (g.as_written) d.as_written = std::make_shared<const Graph>(float64_copy(*g.as_written, fixed_random));
  return d;
}

}  // namespace graphrun
