// CPU kernel of Einsum (opset 12+): any number of operands, "..." broadcast as numpy does, repeated labels
// (diagonals), implicit outputs. One loop over every label's range with each operand's stride per label;
// sums in double.
#include "graph/einsum_equation.h"
#include "runtime/kernels/cpu/math_common.h"

namespace graphrun::runtime::cpu {
namespace {

// Labels are letters; the ellipsis dims get the codes 0..E-1 (right-aligned across operands).
using Label = int;

// An operand's labels, one per axis, with "..." expanded to its share of the ellipsis codes.
std::vector<Label> expand_term(const std::string& term, int rank, int ellipsis_rank, const std::string& eq) {
  std::vector<Label> r;
  const int letters = static_cast<int>(einsum_letters(term).size());
  const bool has = einsum_has_ellipsis(term);
  GR_CHECK(has ? rank >= letters : rank == letters, "Einsum: equation '" << eq << "': term '" << term << "' has "
                                                                          << letters << " labels for an operand of rank "
                                                                          << rank);
  const int e = has ? rank - letters : 0;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      for (int k = 0; k < e; ++k) r.push_back(ellipsis_rank - e + k);
      i += 2;
    } else {
      r.push_back(static_cast<unsigned char>(term[i]));
    }
  }
  return r;
}

template <class T>
void einsum_typed(KernelContext& ctx) {
  const std::string eqs = ctx.node().attr_s("equation", "");
  const EinsumEquation eq = parse_einsum(eqs);
  const int n = ctx.num_inputs();
  GR_CHECK(static_cast<int>(eq.inputs.size()) == n,
           "Einsum: equation '" << eqs << "' has " << eq.inputs.size() << " operands, the node " << n);
  int ellipsis_rank = 0;
  for (int i = 0; i < n; ++i)
    if (einsum_has_ellipsis(eq.inputs[i]))
      ellipsis_rank = std::max(ellipsis_rank, ctx.input(i).rank() - static_cast<int>(einsum_letters(eq.inputs[i]).size()));
  // Every label's size; ellipsis dims broadcast (1 against n), letters must agree.
  std::map<Label, int64_t> size;
  std::vector<std::vector<Label>> terms(n);
  for (int i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    GR_CHECK(t.dtype() == ctx.input(0).dtype(), "Einsum: operands differ in element type");
    terms[i] = expand_term(eq.inputs[i], t.rank(), ellipsis_rank, eqs);
    for (int k = 0; k < t.rank(); ++k) {
      const Label l = terms[i][k];
      auto it = size.find(l);
      if (it == size.end()) {
        size[l] = t.dim(k);
      } else if (it->second != t.dim(k)) {
        const bool ellipsis_dim = l < 'A';
        GR_CHECK(ellipsis_dim && (it->second == 1 || t.dim(k) == 1),
                 "Einsum: equation '" << eqs << "': label '" << (ellipsis_dim ? std::string("...") : std::string(1, char(l)))
                                      << "' has sizes " << it->second << " and " << t.dim(k));
        if (it->second == 1) it->second = t.dim(k);
      }
    }
  }
  std::vector<Label> out;
  for (size_t i = 0; i < eq.output.size(); ++i) {
    if (eq.output[i] == '.') {
      for (int k = 0; k < ellipsis_rank; ++k) out.push_back(k);
      i += 2;
    } else {
      out.push_back(static_cast<unsigned char>(eq.output[i]));
    }
  }
  // Loop order: the output's labels, then the summed ones.
  std::vector<Label> loop = out;
  for (const auto& [l, s] : size)
    if (std::find(loop.begin(), loop.end(), l) == loop.end()) loop.push_back(l);
  Shape out_shape;
  for (Label l : out) out_shape.push_back(size.count(l) ? size[l] : 1);
  Tensor& y = ctx.output(0, out_shape, ctx.input(0).dtype());
  const int L = static_cast<int>(loop.size());
  std::vector<int64_t> dims(L);
  for (int k = 0; k < L; ++k) dims[k] = size.count(loop[k]) ? size[loop[k]] : 1;
  // strides[i][k]: operand i's step when loop label k advances (summed over repeated labels, 0 where broadcast).
  std::vector<std::vector<int64_t>> strides(n, std::vector<int64_t>(L, 0));
  for (int i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    int64_t st = 1;
    for (int a = t.rank() - 1; a >= 0; --a) {
      const int k = static_cast<int>(std::find(loop.begin(), loop.end(), terms[i][a]) - loop.begin());
      if (t.dim(a) != 1) strides[i][k] += st;
      st *= t.dim(a);
    }
  }
  const int64_t out_n = y.numel();
  int64_t inner = 1;
  for (int k = static_cast<int>(out.size()); k < L; ++k) inner *= dims[k];
  std::vector<const T*> p(n);
  for (int i = 0; i < n; ++i) p[i] = ptr<T>(ctx.input(i));
  T* py = ptr<T>(y);
  std::vector<int64_t> c(L, 0), off(n, 0);
  for (int64_t o = 0; o < out_n; ++o) {
    double acc = 0;
    for (int64_t s = 0; s < inner; ++s) {
      double prod = 1;
      for (int i = 0; i < n; ++i) prod *= static_cast<double>(p[i][off[i]]);
      acc += prod;
      // Advance the odometer (the output's labels too, when the summed ones wrap).
      for (int k = L; k-- > 0;) {
        for (int i = 0; i < n; ++i) off[i] += strides[i][k];
        if (++c[k] < dims[k]) break;
        for (int i = 0; i < n; ++i) off[i] -= strides[i][k] * dims[k];
        c[k] = 0;
      }
    }
    py[o] = static_cast<T>(acc);
    if (inner == 0)  // an empty summed range: the output labels still advance
      for (int k = static_cast<int>(out.size()); k-- > 0;) {
        for (int i = 0; i < n; ++i) off[i] += strides[i][k];
        if (++c[k] < dims[k]) break;
        for (int i = 0; i < n; ++i) off[i] -= strides[i][k] * dims[k];
        c[k] = 0;
      }
  }
}

void einsum_kernel(KernelContext& ctx) {
  GR_CHECK(ctx.num_inputs() >= 1, "Einsum: needs at least one operand");
  dispatch_float(ctx.input(0).dtype(), "Einsum", [&](auto tag) { einsum_typed<decltype(tag)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(einsum) {
  ops.op("Einsum").cpu(einsum_kernel);
}

}  // namespace graphrun::runtime::cpu
