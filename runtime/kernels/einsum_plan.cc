// The loop of an Einsum node (einsum_plan.h): "..." broadcast as numpy does, repeated labels (diagonals),
// implicit outputs.
#include "runtime/kernels/einsum_plan.h"

#include <algorithm>
#include <map>

#include "graph/einsum_equation.h"
#include "runtime/kernel.h"

namespace graphrun::runtime {
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

}  // namespace

EinsumPlan plan_einsum(const std::string& eqs, const std::vector<Shape>& shapes) {
  const EinsumEquation eq = parse_einsum(eqs);
  const int n = static_cast<int>(shapes.size());
  GR_CHECK(static_cast<int>(eq.inputs.size()) == n,
           "Einsum: equation '" << eqs << "' has " << eq.inputs.size() << " operands, the node " << n);
  auto dim = [&](int i, int k) { return shapes[i][k]; };
  auto rank = [&](int i) { return static_cast<int>(shapes[i].size()); };
  int ellipsis_rank = 0;
  for (int i = 0; i < n; ++i)
    if (einsum_has_ellipsis(eq.inputs[i]))
      ellipsis_rank = std::max(ellipsis_rank, rank(i) - static_cast<int>(einsum_letters(eq.inputs[i]).size()));
  // Every label's size; ellipsis dims broadcast (1 against n), letters must agree.
  std::map<Label, int64_t> size;
  std::vector<std::vector<Label>> terms(n);
  for (int i = 0; i < n; ++i) {
    terms[i] = expand_term(eq.inputs[i], rank(i), ellipsis_rank, eqs);
    for (int k = 0; k < rank(i); ++k) {
      const Label l = terms[i][k];
      auto it = size.find(l);
      if (it == size.end()) {
        size[l] = dim(i, k);
      } else if (it->second != dim(i, k)) {
        const bool ellipsis_dim = l < 'A';
        GR_CHECK(ellipsis_dim && (it->second == 1 || dim(i, k) == 1),
                 "Einsum: equation '" << eqs << "': label '" << (ellipsis_dim ? std::string("...") : std::string(1, char(l)))
                                      << "' has sizes " << it->second << " and " << dim(i, k));
        if (it->second == 1) it->second = dim(i, k);
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
  EinsumPlan p;
  for (Label l : out) p.out_shape.push_back(size.count(l) ? size[l] : 1);
  p.out_labels = static_cast<int>(out.size());
  const int L = static_cast<int>(loop.size());
  std::vector<int64_t>& dims = p.dims;
  dims.resize(L);
  for (int k = 0; k < L; ++k) dims[k] = size.count(loop[k]) ? size[loop[k]] : 1;
  // strides[i][k]: operand i's step when loop label k advances (summed over repeated labels, 0 where broadcast).
  std::vector<std::vector<int64_t>>& strides = p.strides;
  strides.assign(n, std::vector<int64_t>(L, 0));
  for (int i = 0; i < n; ++i) {
    int64_t st = 1;
    for (int a = rank(i) - 1; a >= 0; --a) {
      const int k = static_cast<int>(std::find(loop.begin(), loop.end(), terms[i][a]) - loop.begin());
      if (dim(i, a) != 1) strides[i][k] += st;
      st *= dim(i, a);
    }
  }
  return p;
}

}  // namespace graphrun::runtime
