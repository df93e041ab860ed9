// Tensor files: .npy written by numpy and .pb written by onnx.numpy_helper at test time, both directions.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "graph/tensor_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::python;
using testing::run_command;
using testing::run_onnx_python;
using testing::temp_dir;


// Each file holds arange(n) % 100 (bool: % 2) in the given dtype and shape.
const char* kWriteNpy = R"(
cases = [('f32', np.float32, (2, 3)), ('f64', np.float64, (4,)), ('i64', np.int64, (2, 2, 2)),
         ('i32', np.int32, (3, 1)), ('i8', np.int8, (5,)), ('u8', np.uint8, (2, 3)), ('bool', np.bool_, (7,)),
         ('f16', np.float16, (6,)), ('scalar', np.float32, ()), ('empty', np.float32, (0, 3)), ('big', np.float32, (3, 70, 5))]
for name, dt, shape in cases:
    n = int(np.prod(shape))
    a = (np.arange(n) % (2 if dt == np.bool_ else 100)).astype(dt).reshape(shape)
    np.save(name + '.npy', a)
with open('v2.npy', 'wb') as f:
    np.lib.format.write_array(f, np.arange(6, dtype=np.int64).reshape(2, 3), version=(2, 0))
np.save('fortran.npy', np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save('fortran3.npy', np.asfortranarray(np.arange(24, dtype=np.int64).reshape(2, 3, 4)))
np.save('bigendian.npy', np.arange(6, dtype='>f4'))
np.save('complex.npy', np.arange(3, dtype=np.complex64))
data = open('big.npy', 'rb').read()
open('truncated.npy', 'wb').write(data[:len(data) - 100])
open('cut_header.npy', 'wb').write(data[:40])
open('trailing.npy', 'wb').write(data + b'1234')
open('text.npy', 'w').write('not numpy\n')
)";

TEST(TensorIo, ReadsNumpyFilesOfEveryDtype) {
  std::string dir = temp_dir("tensor_io_npy");
  run_onnx_python(dir, kWriteNpy);
  struct Case { const char* file; DType dtype; Shape shape; };
  for (const Case& c : {Case{"f32", DType::F32, {2, 3}}, Case{"f64", DType::F64, {4}}, Case{"i64", DType::I64, {2, 2, 2}},
                        Case{"i32", DType::I32, {3, 1}}, Case{"i8", DType::I8, {5}}, Case{"u8", DType::U8, {2, 3}},
                        Case{"bool", DType::Bool, {7}}, Case{"scalar", DType::F32, {}}, Case{"empty", DType::F32, {0, 3}},
                        Case{"big", DType::F32, {3, 70, 5}}, Case{"v2", DType::I64, {2, 3}}}) {
    SCOPED_TRACE(c.file);
    Tensor t = read_npy(dir + "/" + c.file + ".npy");
    EXPECT_EQ(t.dtype(), c.dtype);
    EXPECT_EQ(t.shape(), c.shape);
    auto v = t.as_doubles();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], c.dtype == DType::Bool ? i % 2 : i % 100) << i;
  }
  Tensor h = read_tensor_file(dir + "/f16.npy");
  ASSERT_EQ(h.dtype(), DType::F16);
  const uint16_t want[] = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400, 0x4500};  // 0..5 as IEEE half
  for (int i = 0; i < 6; ++i) EXPECT_EQ(static_cast<const uint16_t*>(h.raw())[i], want[i]);
}

void expect_error(const std::string& path, const std::string& what) {
  try {
    read_tensor_file(path);
    ADD_FAILURE() << path << ": read, expected an error about " << what;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// numpy saves a transposed array in Fortran (column-major) order: it reads as the array it is.
TEST(TensorIo, FortranOrderNumpyFilesReadInCOrder) {
  std::string dir = temp_dir("tensor_io_npy_fortran");
  run_onnx_python(dir, kWriteNpy);
  const Tensor t = read_npy(dir + "/fortran.npy");
  EXPECT_EQ(shape_str(t.shape()), "[2,3]");
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  const Tensor t3 = read_npy(dir + "/fortran3.npy");
  EXPECT_EQ(shape_str(t3.shape()), "[2,3,4]");
  std::vector<int64_t> want(24);
  for (int64_t i = 0; i < 24; ++i) want[i] = i;
  EXPECT_EQ(t3.to_vector<int64_t>(), want);
}

TEST(TensorIo, BadNumpyFilesGiveClearErrors) {
  std::string dir = temp_dir("tensor_io_npy_bad");
  run_onnx_python(dir, kWriteNpy);
  expect_error(dir + "/bigendian.npy", "big-endian");
  expect_error(dir + "/complex.npy", "not supported");
  expect_error(dir + "/truncated.npy", "truncated");
  expect_error(dir + "/cut_header.npy", "truncated");
  expect_error(dir + "/trailing.npy", "corrupt");
  expect_error(dir + "/text.npy", "not a .npy file");
  expect_error(dir + "/missing.npy", "no such file");
  expect_error(dir + "/f32.txt", "expected a .npy or .pb");
}

TEST(TensorIo, WritesNumpyFilesNumpyReads) {
  std::string dir = temp_dir("tensor_io_npy_write");
  write_npy(dir + "/f32.npy", Tensor::from_vector<float>({2, 3}, {0.5f, -1, 2, 3, 4, 1e-8f}));
  write_npy(dir + "/i64.npy", Tensor::from_vector<int64_t>({3}, {-1, 0, int64_t{1} << 40}));
  write_npy(dir + "/u8.npy", Tensor::from_vector<uint8_t>({1, 2}, {7, 255}));
  write_npy(dir + "/bool.npy", Tensor::from_vector<bool>({2}, {true, false}));
  write_npy(dir + "/scalar.npy", Tensor::scalar<double>(2.5));
  write_npy(dir + "/empty.npy", Tensor(DType::I32, {0}));
  run_onnx_python(dir, R"(
def check(name, want):
    a = np.load(name + '.npy')
    assert a.dtype == want.dtype and a.shape == want.shape and np.array_equal(a, want), (name, a, want)
    assert (open(name + '.npy', 'rb').read().index(b'\n') + 1) % 64 == 0, name  # numpy's alignment
check('f32', np.array([[0.5, -1, 2], [3, 4, 1e-8]], dtype=np.float32))
check('i64', np.array([-1, 0, 1 << 40], dtype=np.int64))
check('u8', np.array([[7, 255]], dtype=np.uint8))
check('bool', np.array([True, False]))
check('scalar', np.array(2.5))
check('empty', np.zeros((0,), dtype=np.int32))
)");
  // And back.
  Tensor t = read_npy(dir + "/f32.npy");
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0.5f, -1, 2, 3, 4, 1e-8f}));
  EXPECT_EQ(read_npy(dir + "/scalar.npy").shape(), Shape{});
}

TEST(TensorIo, ReadsAndWritesOnnxTensorProtos) {
  std::string dir = temp_dir("tensor_io_pb");
  run_onnx_python(dir, R"(
def save(name, t):
    open(name + '.pb', 'wb').write(t.SerializeToString())
save('raw_f32', numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) / 4, 'x'))
save('raw_i64', numpy_helper.from_array(np.array([5, -6, 7], dtype=np.int64), 'labels'))
save('typed_f32', helper.make_tensor('t', TensorProto.FLOAT, [3], [1.5, 2.5, -3.0]))
save('typed_i32', helper.make_tensor('t', TensorProto.INT32, [2, 2], [1, -2, 3, 4]))
save('typed_bool', helper.make_tensor('t', TensorProto.BOOL, [3], [True, False, True]))
save('typed_f64', helper.make_tensor('t', TensorProto.DOUBLE, [2], [0.125, 1e300]))
mis = helper.make_tensor('t', TensorProto.FLOAT, [2], [1.0, 2.0]); mis.dims[0] = 4; save('mismatch', mis)
save('string', helper.make_tensor('t', TensorProto.STRING, [1], [b'abc']))
open('garbage.pb', 'wb').write(b'\xff\xff\xff\xff\xff not a proto')
)");
  EXPECT_EQ(read_tensor_file(dir + "/raw_f32.pb").to_vector<float>(),
            (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1, 1.25f}));
  EXPECT_EQ(read_tensor_file(dir + "/raw_f32.pb").shape(), (Shape{2, 3}));
  EXPECT_EQ(read_tensor_pb(dir + "/raw_i64.pb").to_vector<int64_t>(), (std::vector<int64_t>{5, -6, 7}));
  EXPECT_EQ(read_tensor_pb(dir + "/typed_f32.pb").to_vector<float>(), (std::vector<float>{1.5f, 2.5f, -3}));
  EXPECT_EQ(read_tensor_pb(dir + "/typed_i32.pb").to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3, 4}));
  EXPECT_EQ(read_tensor_pb(dir + "/typed_bool.pb").to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(read_tensor_pb(dir + "/typed_f64.pb").to_vector<double>(), (std::vector<double>{0.125, 1e300}));
  expect_error(dir + "/mismatch.pb", "float_data holds 2 values");
  expect_error(dir + "/string.pb", "STRING is not supported");
  expect_error(dir + "/garbage.pb", "not an ONNX TensorProto");

  write_tensor_pb(dir + "/out.pb", Tensor::from_vector<float>({2, 2}, {1, 2, 3, -4}), "result");
  write_tensor_pb(dir + "/out_i64.pb", Tensor::from_vector<int64_t>({3}, {9, 8, 7}));
  run_onnx_python(dir, R"(
t = onnx.load_tensor('out.pb')
assert t.name == 'result', t.name
a = numpy_helper.to_array(t)
assert a.dtype == np.float32 and np.array_equal(a, [[1, 2], [3, -4]]), a
b = numpy_helper.to_array(onnx.load_tensor('out_i64.pb'))
assert b.dtype == np.int64 and np.array_equal(b, [9, 8, 7]), b
)");
}

}  // namespace
}  // namespace graphrun
