// The spectral ops against what nobody here wrote: DFT against numpy's FFT (real and complex, onesided, inverse,
// dft_length padding and truncation, inner and negative axes), STFT against torch.stft (center=False, a Hann window
// or none, real onesided and complex two-sided), MelWeightMatrix against ONNX's reference filter bank. Then an audio
// front end written as users write it (STFT with a learnable window, power, a mel filter bank, log) is trainable:
// `check` passes its gradient check and `train` learns tones from noise.
#include <gtest/gtest.h>

#include <fstream>

#include "graph/tensor_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::python;
using testing::run_command;
using testing::run_node;
using testing::run_onnx_python;
using testing::temp_dir;
using A = Attribute;

Tensor scalar64(int64_t v) { return Tensor::from_vector<int64_t>({}, {v}); }

void expect_close(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_LE(testing::max_abs_diff(got, want), tol);
}

TEST(Spectral, DftMatchesNumpyFft) {
  if (run_command(python() + " -c 'import numpy' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks numpy";
  const std::string dir = temp_dir("spectral_dft");
  run_onnx_python(dir, R"(
r = np.random.default_rng(0)
x = r.standard_normal((2, 12, 3, 1))
np.save('real.npy', x.astype(np.float32))
def pack(y):
    return np.stack([y.real, y.imag], -1).astype(np.float32)
np.save('rfft16_axis1.npy', pack(np.fft.rfft(x[..., 0], n=16, axis=1)))
np.save('fft2_axis2.npy', pack(np.fft.fft(x[..., 0], n=2, axis=2)))
np.save('fft_axis1.npy', pack(np.fft.fft(x[..., 0], axis=1)))
z = r.standard_normal((3, 7, 4)) + 1j * r.standard_normal((3, 7, 4))
np.save('complex.npy', pack(z))
np.save('ifft_axis1.npy', pack(np.fft.ifft(z, axis=1)))
np.save('fft10_axis0.npy', pack(np.fft.fft(z, n=10, axis=0)))
)");
  auto npy = [&](const char* f) { return read_npy(dir + "/" + f + ".npy"); };
  const Tensor real = npy("real"), cplx = npy("complex");
  expect_close(run_node("DFT", {real, scalar64(16)}, {{"axis", A::Int(1)}, {"onesided", A::Int(1)}})[0],
               npy("rfft16_axis1"), 1e-5);
  expect_close(run_node("DFT", {real, scalar64(2)}, {{"axis", A::Int(-2)}})[0], npy("fft2_axis2"), 1e-5);
  expect_close(run_node("DFT", {real}, {})[0], npy("fft_axis1"), 1e-5);
  expect_close(run_node("DFT", {cplx}, {{"axis", A::Int(-3)}, {"inverse", A::Int(1)}})[0], npy("ifft_axis1"), 1e-6);
  expect_close(run_node("DFT", {cplx, scalar64(10)}, {{"axis", A::Int(0)}})[0], npy("fft10_axis0"), 1e-5);
  // float64 in, float64 out.
  const std::vector<double> r64 = real.as_doubles();
  EXPECT_EQ(run_node("DFT", {Tensor::from_vector<double>(real.shape(), r64)}, {})[0].dtype(), DType::F64);
  // What the spec does not allow, in one line each.
  for (const auto& [attrs, why] : std::vector<std::pair<std::map<std::string, Attribute>, std::string>>{
           {{{"axis", A::Int(3)}}, "axis 3 is out of range"},
           {{{"onesided", A::Int(1)}, {"inverse", A::Int(0)}}, "onesided output needs a real input"}}) {
    try {
      run_node("DFT", {cplx}, attrs);
      ADD_FAILURE() << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

TEST(Spectral, StftMatchesTorchStft) {
  if (run_command(python() + " -c 'import torch' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks torch";
  const std::string dir = temp_dir("spectral_stft");
  run_onnx_python(dir, R"(
import torch
torch.manual_seed(0)
x = torch.randn(2, 100, dtype=torch.float64)
w = torch.hann_window(16, dtype=torch.float64)
np.save('signal.npy', x.numpy()[..., None].astype(np.float32))
np.save('window.npy', w.numpy().astype(np.float32))
def real(s):
    return torch.view_as_real(s).numpy().transpose(0, 2, 1, 3).astype(np.float32)  # [B, frames, bins, 2]
np.save('hann.npy', real(torch.stft(x, 16, hop_length=5, win_length=16, window=w, center=False, onesided=True,
                                    return_complex=True)))
np.save('plain.npy', real(torch.stft(x, 20, hop_length=7, window=torch.ones(20, dtype=torch.float64), center=False,
                                     onesided=True, return_complex=True)))
z = torch.randn(2, 64, dtype=torch.complex128)
np.save('complex_signal.npy', torch.view_as_real(z).numpy().astype(np.float32))
np.save('complex.npy', real(torch.stft(z, 16, hop_length=8, window=w, center=False, onesided=False, return_complex=True)))
)");
  auto npy = [&](const char* f) { return read_npy(dir + "/" + f + ".npy"); };
  const Tensor signal = npy("signal"), window = npy("window");
  expect_close(run_node("STFT", {signal, scalar64(5), window})[0], npy("hann"), 1e-4);
  expect_close(run_node("STFT", {signal, scalar64(7), Tensor(), scalar64(20)})[0], npy("plain"), 1e-4);
  expect_close(run_node("STFT", {npy("complex_signal"), scalar64(8), window}, {{"onesided", A::Int(0)}})[0],
               npy("complex"), 1e-4);
  try {
    run_node("STFT", {signal, scalar64(5), window, scalar64(12)});
    ADD_FAILURE() << "a frame_length other than the window's was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("frame_length 12 differs from the window's length 16"), std::string::npos)
        << e.what();
  }
}

TEST(Spectral, MelWeightMatrixIsOnnxsFilterBank) {
  if (run_command(python() + " -c 'import numpy' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks numpy";
  const std::string dir = temp_dir("spectral_mel");
  // ONNX's reference (onnx/backend/test/case/node/melweightmatrix.py) in float64, for several banks.
  run_onnx_python(dir, R"(
def bank(mel_bins, dft_length, sample_rate, lower, upper):
    bins = dft_length // 2 + 1
    f = np.arange(0, mel_bins + 2)
    low = 2595 * np.log10(1 + lower / 700)
    high = 2595 * np.log10(1 + upper / 700)
    f = f * ((high - low) / f.shape[0]) + low
    f = 700 * (np.power(10, (f / 2595)) - 1)
    f = (((dft_length + 1) * f) // sample_rate).astype(int)
    out = np.zeros((bins, mel_bins))
    for i in range(mel_bins):
        l, c, h = f[i], f[i + 1], f[i + 2]
        if c == l:
            out[c, i] = 1
        else:
            for j in range(l, c + 1):
                out[j, i] = (j - l) / (c - l)
        if h > c:
            for j in range(c, h):
                out[j, i] = (h - j) / (h - c)
    return out.astype(np.float32)
for k, args in enumerate([(8, 16, 8192, 0.0, 4096.0), (40, 512, 16000, 20.0, 8000.0), (10, 400, 22050, 300.0, 6000.0)]):
    np.save('bank%d.npy' % k, bank(*args))
)");
  struct Case {
    int32_t mel, dft, rate;
    float lo, hi;
  };
  const Case cases[] = {{8, 16, 8192, 0.f, 4096.f}, {40, 512, 16000, 20.f, 8000.f}, {10, 400, 22050, 300.f, 6000.f}};
  for (int k = 0; k < 3; ++k) {
    const Case& c = cases[k];
    auto i32 = [](int32_t v) { return Tensor::from_vector<int32_t>({}, {v}); };
    auto f32 = [](float v) { return Tensor::from_vector<float>({}, {v}); };
    const Tensor got = run_node("MelWeightMatrix", {i32(c.mel), i32(c.dft), i32(c.rate), f32(c.lo), f32(c.hi)})[0];
    expect_close(got, read_npy(dir + "/bank" + std::to_string(k) + ".npy"), 1e-6);
  }
}

// An audio classifier's front end in the graph: STFT of the raw signal with a learnable window, power, a mel filter
// bank (MelWeightMatrix), log, then a linear head. Three classes of tones in noise. Its hop is a value named 'step',
// the name of the step count Adam's update reads: training names that one step__2.
TEST(Spectral, AudioFrontEndChecksAndTrains) {
  if (run_command(python() + " -c 'import numpy' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks numpy";
  const std::string dir = temp_dir("spectral_audio");
  run_onnx_python(dir, R"(
n, length = 64, 512
window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)
i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [], [v])
i32 = lambda name, v: helper.make_tensor(name, TensorProto.INT32, [], [v])
f32 = lambda name, v: helper.make_tensor(name, TensorProto.FLOAT, [], [v])
frames = (length - n) // 32 + 1
r = np.random.default_rng(0)
const = lambda t: helper.make_node('Constant', [], [t.name], value=t)
nodes = [const(i32('mels', 16)), const(i32('dft', n)), const(i32('rate', 8000)), const(f32('lo', 0.0)),
         const(f32('hi', 4000.0)), const(f32('eps', 1e-3)),
    helper.make_node('STFT', ['audio', 'step', 'window'], ['spec']),
    helper.make_node('Mul', ['spec', 'spec'], ['sq']),
    helper.make_node('ReduceSum', ['sq', 'last'], ['power'], keepdims=0),
    helper.make_node('MelWeightMatrix', ['mels', 'dft', 'rate', 'lo', 'hi'], ['bank']),
    helper.make_node('MatMul', ['power', 'bank'], ['mel']),
    helper.make_node('Add', ['mel', 'eps'], ['mel_eps']),
    helper.make_node('Log', ['mel_eps'], ['logmel']),
    helper.make_node('Flatten', ['logmel'], ['features']),
    helper.make_node('Gemm', ['features', 'w', 'b'], ['logits']),
]
inits = [i64('step', 32), numpy_helper.from_array(window, 'window'), helper.make_tensor('last', TensorProto.INT64, [1], [-1]),
         numpy_helper.from_array((r.standard_normal((frames * 16, 3)) * 0.01).astype(np.float32), 'w'),
         numpy_helper.from_array(np.zeros(3, np.float32), 'b')]
g = helper.make_graph(nodes, 'audio', [helper.make_tensor_value_info('audio', TensorProto.FLOAT, ['N', length, 1])],
                      [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['N', 3])], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'audio.onnx')
t = np.arange(length) / 8000.0
labels = r.integers(0, 3, 600)
freqs = np.array([440.0, 1200.0, 2500.0])
audio = np.sin(2 * np.pi * freqs[labels][:, None] * t + r.uniform(0, 6.3, (600, 1))) + 0.5 * r.standard_normal((600, length))
np.savez('tones.npz', audio=audio[..., None].astype(np.float32), labels=labels.astype(np.int64))
)");
  const std::string model = dir + "/audio.onnx";
  auto check = run_command(testing::graphrun_cli() + " check " + model + " 2>&1");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("\nverdict: trainable"), std::string::npos) << check.output;
  auto train = run_command(testing::graphrun_cli() + " train " + model + " --data " + dir +
                           "/tones.npz --epochs 3 --batch-size 32 --optimizer adam --lr 0.01 --devices cpu:2 2>&1");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const auto at = train.output.rfind("test acc: ");
  ASSERT_NE(at, std::string::npos) << train.output;
  EXPECT_GE(std::stod(train.output.substr(at + 10)), 0.9) << train.output;
}

}  // namespace
}  // namespace graphrun
