// Einsum on the CPU against numpy.einsum: contractions, "..." broadcast, diagonals, implicit outputs, three
// operands, f32; and equations that do not fit their operands give one clear error.
#include "tests/math_test_util.h"

namespace graphrun::mathtest {
namespace {

struct Case {
  std::string eq;
  std::vector<Shape> shapes;
};

TEST(Einsum, MatchesNumpy) {
  const std::vector<Case> cases = {
      {"bhid,bhjd->bhij", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"ij,jk", {{3, 4}, {4, 2}}},
      {"ij,jk->", {{3, 4}, {4, 2}}},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 5}}},
      {"...i,...i", {{2, 3}, {3}}},
      {"ii->i", {{4, 4}}},
      {"bii->b", {{2, 3, 3}}},
      {"iij->ji", {{3, 3, 2}}},
      {"Ab,bA->", {{2, 3}, {3, 2}}},
      {"bA,Ac", {{2, 3}, {3, 4}}},
      {"ab,bc,cd->da", {{2, 3}, {3, 4}, {4, 2}}},
      {"i,j", {{3}, {2}}},
      {"ij", {{3, 0}}},
      {"ij,jk->ik", {{2, 0}, {0, 3}}},
      {"", {{}}},
      // Through GEMM: batch labels in any order, outputs permuted, labels summed within one operand,
      // ranges of 1, broadcast "..."; a diagonal beside a contraction falls back to the loop.
      {"bij,bjk->kbi", {{2, 3, 4}, {2, 4, 5}}},
      {"abc,cd->dba", {{2, 3, 4}, {4, 5}}},
      {"ij,kl->ik", {{3, 4}, {2, 5}}},
      {"bij,jk->bik", {{1, 3, 4}, {4, 5}}},
      {"i,i->", {{7}, {7}}},
      {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},
      {"ij,ij->ij", {{3, 4}, {3, 4}}},
      {"...ij,jk->...ik", {{2, 1, 3, 4}, {4, 2}}},
      {"iij,jk->ik", {{3, 3, 4}, {4, 2}}},
  };
  std::vector<std::string> exprs;
  std::vector<Tensor> got;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    std::vector<Tensor> ins;
    std::string args;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      ins.push_back(sin_tensor(c.shapes[i], 1.0 + i));
      args += ", " + py_sin(c.shapes[i], 1.0 + i);
    }
    exprs.push_back("np.einsum('" + c.eq + "'" + args + ")");
    got.push_back(run_op("Einsum", ins, {{"equation", Attribute::Str(c.eq)}}, 1, 13)[0]);
  }
  auto want = numpy_eval(exprs, "einsum");
  ASSERT_EQ(want.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) expect_close(got[k], want[k], 1e-12, cases[k].eq);
  // f32 in, f32 out (summed in double).
  Tensor a = make(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6}), b = make(DType::F32, {3}, {1, 0.5, -1});
  Tensor y = run_op("Einsum", {a, b}, {{"equation", Attribute::Str("ij,j->i")}}, 1, 13)[0];
  ASSERT_EQ(y.dtype(), DType::F32);
  expect_close(as_f64(y), make(DType::F64, {2}, {-1, 0.5}), 1e-6);
}

// Two operands go through the GEMM that MatMul calls, with the same arguments: an Einsum written for a
// (batched) matrix product gives the MatMul's bits, and costs what it costs.
TEST(Einsum, MatrixProductsAreTheMatMulBitForBit) {
  const Tensor a = rand(DType::F32, {3, 64, 48}, 1), b = rand(DType::F32, {3, 48, 40}, 2);
  auto einsum = [](const char* eq, const std::vector<Tensor>& in) {
    return run_op("Einsum", in, {{"equation", Attribute::Str(eq)}}, 1, 13)[0];
  };
  EXPECT_EQ(testing::max_abs_diff(einsum("bij,bjk->bik", {a, b}), run_op("MatMul", {a, b}, {}, 1, 13)[0]), 0);
  // B stored [k, j]: gathered into [j, k] as Transpose would lay it out.
  const Tensor bt = run_op("Transpose", {b}, {{"perm", Attribute::Ints({0, 2, 1})}}, 1, 13)[0];
  EXPECT_EQ(testing::max_abs_diff(einsum("bij,bkj->bik", {a, bt}), run_op("MatMul", {a, b}, {}, 1, 13)[0]), 0);
}

TEST(Einsum, BadEquationsGiveClearErrors) {
  Tensor a = sin_tensor({2, 3}), b = sin_tensor({4, 5});
  auto eq = [](const char* e) { return std::map<std::string, Attribute>{{"equation", Attribute::Str(e)}}; };
  expect_error([&] { run_op("Einsum", {a, b}, eq("ij,jk->ik"), 1, 13); }, {"label 'j'", "sizes 3 and 4"});
  expect_error([&] { run_op("Einsum", {a}, eq("ijk->i"), 1, 13); }, {"3 labels", "rank 2"});
  expect_error([&] { run_op("Einsum", {a}, eq("ij->iz"), 1, 13); }, {"'z' is in no input"});
  expect_error([&] { run_op("Einsum", {a}, eq("i1->i"), 1, 13); }, {"'1' is not a letter"});
  expect_error([&] { run_op("Einsum", {a, b}, eq("ij->i"), 1, 13); }, {"1 operands", "the node 2"});
  expect_error([&] { run_op("Einsum", {a}, eq("ij->ii"), 1, 13); }, {"appears twice"});
}

}  // namespace
}  // namespace graphrun::mathtest
