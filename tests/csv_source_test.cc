// CSV and TSV tables as training data (runtime/data/csv.cc): what pandas reads (quoted fields with delimiters,
// doubled quotes and line breaks, CRLF, a byte-order mark, blank lines, spaces around fields), the targets as
// class ids, numbers or class names (a test table numbered as the training table), and every bad table one
// line naming the file, line and column; a regression and a classifier trained from tables equal, bitwise,
// the same training from the same values in .npz files.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "graph/onnx_io.h"
#include "runtime/data/fit.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using namespace runtime::data;
using testing::error_of;

std::string table(const std::string& name, const std::string& text) {
  const std::string d = testing::temp_dir("csv_" + name);
  const std::string path = d + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

OpenOptions labels(const std::string& column) {
  OpenOptions o;
  o.labels = column;
  return o;
}

TEST(Csv, ReadsWhatPandasReads) {
  const std::string p = table("t.csv",
                              "\xEF\xBB\xBF"
                              "a, \"b, with a comma\" ,kind\r\n"
                              "1.5, -2 ,\"cat\"\r\n"
                              "\r\n"
                              "3e2,4,\"dog \"\"rex\"\"\"\r\n"
                              "5,6,\"cat\"");
  EXPECT_EQ(source_kind(p), "csv");
  SourcePtr s = open_source(p, labels("kind"));
  ASSERT_EQ(s->size(), 3);
  EXPECT_EQ(s->spec("features").shape, (Shape{2}));
  EXPECT_EQ(s->spec("features").dtype, DType::F64);
  EXPECT_EQ(s->spec("kind").dtype, DType::I64);
  EXPECT_EQ(s->classes(), (std::vector<std::string>{"cat", "dog \"rex\""}));
  Tensor x(DType::F64, {3, 2}), y(DType::I64, {3});
  std::vector<int64_t> idx{2, 0, 1};
  s->read(idx.data(), 3, {{"features", &x}, {"kind", &y}});
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{5, 6, 1.5, -2, 300, 4}));
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1}));
  // A quoted field may hold a line break (lines count on); a TSV splits at tabs; integer targets are class ids.
  s = open_source(table("q.tsv", "x\tlabels\n1\t3\n2\t\"4\"\n"), labels("labels"));
  EXPECT_EQ(s->spec("labels").dtype, DType::I64);
  std::string e = error_of([&] { open_source(table("n.tsv", "x\tnote\tlabels\n1\t\"two\nlines\"\t3\n4\ty\t5\n")); });
  EXPECT_NE(e.find("line 2: column 'note' holds 'two\\nlines'"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  s = open_source(table("m.tsv", "x\tlabels\n1\t\"two\nlines\"\n2\tone\n"), labels("labels"));
  EXPECT_EQ(s->classes(), (std::vector<std::string>{"one", "two\nlines"}));
  s = open_source(table("f.csv", "x,y\n1,0.5\n2,7\n"), labels("y"));
  EXPECT_EQ(s->spec("y").dtype, DType::F64);
  // A test table numbers its class names as the training table does; a class it lacks there is an error.
  OpenOptions given = labels("kind");
  given.classes = {"ant", "cat", "dog"};
  s = open_source(table("g.csv", "a,kind\n1,dog\n2,ant\n"), given);
  y = Tensor(DType::I64, {2});
  idx = {0, 1};
  s->read(idx.data(), 2, {{"kind", &y}});
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{2, 0}));
  e = error_of([&] { open_source(table("h.csv", "a,kind\n1,dog\n2,eel\n"), given); });
  EXPECT_NE(e.find("line 3: class 'eel' is not among the training data's classes (ant, cat, dog)"), std::string::npos)
      << e;
  // Without targets (--loss output) every column is a feature.
  OpenOptions none;
  none.targets = false;
  EXPECT_EQ(open_source(table("o.csv", "a,b\n1,2\n"), none)->spec("features").shape, (Shape{2}));
}

TEST(Csv, BadTablesAreOneLineNamingTheLineAndColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "the table is empty"},
      {"a,labels\n", "a header but no rows"},
      {"a,b,labels\n1,,0\n", "line 2: column 'b' is missing (graphrun does not impute"},
      {"a,b,labels\n1,NA,0\n", "line 2: column 'b' is missing"},
      {"a,b,labels\n1,inf,0\n", "line 2: column 'b' holds 'inf', not a finite number"},
      {"a,b,labels\n1,red,0\n", "line 2: column 'b' holds 'red', not a finite number (encode categories"},
      {"a,b,labels\n1,2,0\n3,4\n", "line 3 has 2 fields, the header 3"},
      {"a,b,labels\n1,2,\n", "line 2: the target 'labels' is missing"},
      {"a,b\n1,2\n", "no column 'labels' of targets (its columns: a, b; name the target column with --labels NAME)"},
      {"a,a,labels\n1,2,0\n", "the header names column 'a' twice"},
      {"a,,labels\n1,2,0\n", "column 2 of the header has no name"},
      {"labels\n1\n", "no column of features beside the targets 'labels'"},
      {"a,labels\n\"1\" 2,0\n", "line 2: text after a closing quote"},
      {"a,labels\n1,\"0\n2,1\n", "line 2: a quote that is never closed"},
  };
  int k = 0;
  for (const auto& [text, want] : cases) {
    SCOPED_TRACE(text);
    const std::string p = table("bad" + std::to_string(k++) + ".csv", text);
    const std::string e = error_of([&] { open_source(p); });
    EXPECT_NE(e.find("data '" + p + "'"), std::string::npos) << e;
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// The columns feeding each model input: --columns groups, in their order, the columns they leave unread (text
// there is no error), integer inputs as int64/int32 arrays; without groups, a model of several inputs takes each
// input's column of its name. Mistakes are one line naming the column and the input.
TEST(Csv, ColumnsFeedTheModelsInputs) {
  const std::string p = table("groups.csv",
                              "id,a,city,b,c,labels\n"
                              "x1,1.5,3,2,-1,0\n"
                              "x2,2.5,0,4,7,1\n");
  OpenOptions o;
  o.columns = {{"num", {"c", "a", "b"}}, {"city", {"city"}}};
  o.inputs = {{"num", DType::F32}, {"city", DType::I64}};
  SourcePtr s = open_source(p, o);
  EXPECT_EQ(s->spec("num").shape, (Shape{3}));
  EXPECT_EQ(s->spec("num").dtype, DType::F64);
  EXPECT_EQ(s->spec("city").dtype, DType::I64);
  EXPECT_EQ(s->find("features"), nullptr);
  Tensor num(DType::F64, {2, 3}), city(DType::I64, {2, 1}), y(DType::I64, {2});
  std::vector<int64_t> idx{1, 0};
  s->read(idx.data(), 2, {{"num", &num}, {"city", &city}, {"labels", &y}});
  EXPECT_EQ(num.to_vector<double>(), (std::vector<double>{7, 2.5, 4, -1, 1.5, 2}));
  EXPECT_EQ(city.to_vector<int64_t>(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  // An int32 input reads int32; without groups, several inputs take their columns by name.
  o.columns.clear();
  o.inputs = {{"a", DType::F32}, {"city", DType::I32}};
  s = open_source(p, o);
  EXPECT_EQ(s->spec("a").shape, (Shape{1}));
  EXPECT_EQ(s->spec("city").dtype, DType::I32);
  Tensor c32(DType::I32, {2, 1});
  s->read(idx.data(), 2, {{"city", &c32}});
  EXPECT_EQ(c32.to_vector<int32_t>(), (std::vector<int32_t>{0, 3}));
  // A one-input model of int64 ids takes every column but the targets as integers.
  const std::string ids = table("ids.csv", "t0,t1,labels\n4,5,1\n6,7,0\n");
  OpenOptions one;
  one.inputs = {{"tokens", DType::I64}};
  EXPECT_EQ(open_source(ids, one)->spec("features").dtype, DType::I64);

  auto error = [&](const std::string& text, std::vector<ColumnGroup> groups, std::map<std::string, DType> inputs) {
    OpenOptions bad;
    bad.columns = std::move(groups);
    bad.inputs = std::move(inputs);
    const std::string path = table("bad_groups.csv", text);
    const std::string e = error_of([&] { open_source(path, bad); });
    EXPECT_NE(e.find("data '" + path + "'"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    return e;
  };
  const std::string t = "id,a,city,labels\nx1,1.5,3,0\nx2,2.5,0.5,1\n";
  const std::map<std::string, DType> in{{"num", DType::F32}, {"city", DType::I64}};
  EXPECT_NE(
      error(t, {{"num", {"a", "z"}}}, in).find("no column 'z' (--columns num=...; its columns: id, a, city, labels)"),
      std::string::npos);
  EXPECT_NE(error(t, {{"num", {"a", "labels"}}}, in)
                .find("column 'labels' holds the targets (--labels); it cannot feed "
                      "input 'num' too"),
            std::string::npos);
  EXPECT_NE(error(t, {{"num", {"a"}}, {"city", {"a"}}}, in).find("column 'a' feeds two inputs ('num' and 'city')"),
            std::string::npos);
  EXPECT_NE(error(t, {{"num", {"id"}}}, in).find("line 2: column 'id' holds 'x1', not a finite number"),
            std::string::npos);
  EXPECT_NE(error(t, {{"city", {"city"}}}, in)
                .find("line 3: column 'city' holds '0.5', not an integer (it feeds the "
                      "integer input 'city')"),
            std::string::npos);
  EXPECT_NE(error("a,labels\n3000000000,0\n", {{"ids", {"a"}}}, {{"ids", DType::I32}})
                .find("line 2: column 'a' holds 3000000000, beyond the int32 input 'ids'"),
            std::string::npos);
  EXPECT_NE(error(t, {}, in).find("no column 'num' for the model input of that name (its columns: id, a, city, labels; "
                                  "say which columns feed each input with --columns INPUT=COL,...)"),
            std::string::npos);
}

// The same values from a table and from an .npz train the same weights, bitwise: a linear regression on a
// CSV's float targets (--loss mse) and a classifier on a TSV's class names (numbered in sorted order, the test
// table by the training table's numbering), against the class ids the script writes into the .npz.
TEST(Csv, TablesTrainBitwiseAsTheSameArrays) {
  const std::string d = testing::temp_dir("csv_train");
  testing::run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(4)
x = r.randn(300, 5).astype(np.float32); w = r.randn(5).astype(np.float32)
y = (x @ w + 0.1 * r.randn(300)).astype(np.float32)
np.savez('reg.npz', features=x, price=y)
with open('reg.csv', 'w', newline='') as f:
    f.write('"size, m2",rooms,age,lat,lon,price\r\n')
    for i in range(300): f.write(','.join('%.9g' % v for v in x[i]) + ', %.9g\r\n' % y[i])
names = np.array(['setosa', 'versicolor', 'virginica'])
c = r.randint(0, 3, 300); c[:3] = [2, 1, 0]
z = (r.randn(300, 5) + 2 * c[:, None]).astype(np.float32)
np.savez('cls_train.npz', features=z[:240], labels=c[:240]); np.savez('cls_test.npz', features=z[240:], labels=c[240:])
for name, rows in (('cls_train.tsv', range(0, 240)), ('cls_test.tsv', range(240, 300)),
                   ('cls_no_setosa.tsv', [i for i in range(240, 300) if c[i] != 0])):
    with open(name, 'w') as f:
        f.write('a\tb\tc\td\te\tspecies\n')
        for i in rows: f.write('\t'.join('%.9g' % v for v in z[i]) + '\t' + names[c[i]] + '\n')
rows = [i for i in range(240, 300) if c[i] != 0]
np.savez('cls_no_setosa.npz', features=z[rows], labels=c[rows])
def model(name, out):
    g = h.make_graph([h.make_node('Gemm', ['x', 'w', 'b'], ['y'], transB=1)], name,
                     [h.make_tensor_value_info('x', T.FLOAT, ['N', 5])], [h.make_tensor_value_info('y', T.FLOAT, ['N', out])],
                     [nh.from_array((0.1 * r.randn(out, 5)).astype(np.float32), 'w'), nh.from_array(np.zeros(out, np.float32), 'b')])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), name + '.onnx')
model('reg', 1); model('cls', 3)
)");
  const std::string cli = testing::graphrun_cli(),
                    common = " --devices cpu:2 --threads 1 --epochs 2 --batch-size 16 --lr 0.05";
  auto run = [&](const std::string& args, const std::string& rest = "") {
    auto r = testing::run_command(cli + " train " + args + (rest.empty() ? common : rest) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    return r.output;
  };
  run(d + "/reg.onnx --data " + d + "/reg.csv --labels price --loss mse --val-split 0.2 --save " + d + "/reg_csv.onnx");
  run(d + "/reg.onnx --data " + d + "/reg.npz --labels price --loss mse --val-split 0.2 --save " + d + "/reg_npz.onnx");
  const std::string a = run(d + "/cls.onnx --data " + d + "/cls_train.tsv --test-data " + d +
                            "/cls_test.tsv --labels species --save " + d + "/cls_tsv.onnx");
  const std::string b = run(d + "/cls.onnx --data " + d + "/cls_train.npz --test-data " + d + "/cls_test.npz --save " +
                            d + "/cls_npz.onnx");
  for (const auto& [x, y] : {std::pair<std::string, std::string>{"reg_csv", "reg_npz"}, {"cls_tsv", "cls_npz"}}) {
    const auto wa = load_onnx(d + "/" + x + ".onnx").initializers, wb = load_onnx(d + "/" + y + ".onnx").initializers;
    for (const char* k : {"w", "b"}) EXPECT_TRUE(testing::bytes_equal(wa.at(k), wb.at(k))) << x << " " << k;
  }
  auto acc = [](const std::string& out) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex("test acc: ([0-9.]+)"))) << out;
    return m.empty() ? std::string() : std::string(m[1]);
  };
  EXPECT_EQ(acc(a), acc(b));
  // The saved model keeps the class names its ids stand for; --eval-only on a table without one of them numbers
  // the others as training did (the same accuracy as the true ids from an .npz).
  const Graph saved = load_onnx(d + "/cls_tsv.onnx");
  std::string classes;
  for (const auto& [k, v] : saved.meta.props)
    if (k == "graphrun.classes") classes = v;
  EXPECT_EQ(classes, "[\"setosa\",\"versicolor\",\"virginica\"]");
  const std::string e1 =
      run(d + "/cls_tsv.onnx --eval-only --test-data " + d + "/cls_no_setosa.tsv --labels species", " --devices cpu:1");
  const std::string e2 =
      run(d + "/cls_tsv.onnx --eval-only --test-data " + d + "/cls_no_setosa.npz", " --devices cpu:1");
  EXPECT_EQ(acc(e1), acc(e2));
  EXPECT_FALSE(acc(e1).empty());
}

// A model of two inputs (numbers f32[N, 3] and a category id int64[N] into an embedding) trains from a table as
// from an .npz of the same values, bitwise: by --columns (in an order of its own, an ID column of text unread),
// and by the inputs' names where the table has a column of each. --columns on an .npz, or naming no input, is a
// usage error.
TEST(Csv, ColumnsTrainAModelOfSeveralInputsBitwiseAsAnNpz) {
  const std::string d = testing::temp_dir("csv_inputs");
  testing::run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(5)
n = 200
x = r.randn(n, 3).astype(np.float32); city = r.randint(0, 4, n)
y = ((x[:, 0] + x[:, 2] > 0) ^ (city % 2 == 1)).astype(np.int64)
np.savez('two.npz', num=x, city=city, labels=y)
with open('two.csv', 'w') as f:
    f.write('id,c,city,a,b,labels\n')
    for i in range(n): f.write('row%d,%.9g,%d,%.9g,%.9g,%d\n' % (i, x[i, 2], city[i], x[i, 0], x[i, 1], y[i]))
with open('named.csv', 'w') as f:
    f.write('num,city,note,labels\n')
    for i in range(n): f.write('%.9g,%d,"free text, %d",%d\n' % (x[i, 0], city[i], i, y[i]))
np.savez('named.npz', num=x[:, :1], city=city, labels=y)
def model(name, width):
    nodes = [h.make_node('Gather', ['emb', 'city'], ['e']), h.make_node('Concat', ['num', 'e'], ['z'], axis=1),
             h.make_node('Gemm', ['z', 'w', 'b'], ['logits'], transB=1)]
    g = h.make_graph(nodes, name, [h.make_tensor_value_info('num', T.FLOAT, ['N', width]),
                                   h.make_tensor_value_info('city', T.INT64, ['N'])],
                     [h.make_tensor_value_info('logits', T.FLOAT, ['N', 2])],
                     [nh.from_array((0.5 * r.randn(4, 2)).astype(np.float32), 'emb'),
                      nh.from_array((0.1 * r.randn(2, width + 2)).astype(np.float32), 'w'),
                      nh.from_array(np.zeros(2, np.float32), 'b')])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), name + '.onnx')
model('two', 3); model('named', 1)
)");
  const std::string cli = testing::graphrun_cli(),
                    common = " --devices cpu:2 --threads 1 --epochs 2 --batch-size 16 --lr 0.1 --val-split 0.2";
  auto run = [&](const std::string& args) {
    auto r = testing::run_command(cli + " train " + args + common + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    return r;
  };
  run(d + "/two.onnx --data " + d + "/two.csv --columns num=a,b,c --columns city=city --save " + d + "/two_csv.onnx");
  run(d + "/two.onnx --data " + d + "/two.npz --save " + d + "/two_npz.onnx");
  run(d + "/named.onnx --data " + d + "/named.csv --save " + d + "/named_csv.onnx");
  run(d + "/named.onnx --data " + d + "/named.npz --save " + d + "/named_npz.onnx");
  for (const char* m : {"two", "named"}) {
    const auto wa = load_onnx(d + "/" + m + "_csv.onnx").initializers;
    const auto wb = load_onnx(d + "/" + m + "_npz.onnx").initializers;
    for (const char* k : {"emb", "w", "b"}) EXPECT_TRUE(testing::bytes_equal(wa.at(k), wb.at(k))) << m << " " << k;
  }
  auto usage = [&](const std::string& args, const std::string& want) {
    auto r = testing::run_command(cli + " train " + d + "/two.onnx " + args + common + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  };
  usage("--data " + d + "/two.npz --columns num=a,b,c",
        "--columns picks a table's columns, but --data '" + d + "/two.npz' is no .csv/.tsv table");
  usage("--data " + d + "/two.csv --columns numbers=a,b,c",
        "--columns numbers=...: the model has no input 'numbers' (its inputs: num, city)");
  usage("--data " + d + "/two.csv --columns num=a,,c", "--columns num=a,,c: an empty column name");
  usage("--data " + d + "/two.csv --columns num", "--columns takes INPUT=COL,COL,..., got 'num'");
}

}  // namespace
}  // namespace graphrun
