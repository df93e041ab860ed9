// Measures single-precision GEMM throughput at the shapes graphrun's conv and Gemm kernels run for
// LeNet, SimpleCNN and ResNet-18, for every GEMM library this build found, as % of a measured FMA peak.
//
//   bench_gemm [-m lenet|simplecnn|resnet18]... [-l LIB]... [-t 1|2x1|1x2]... [-b batch] [-s seconds]
//              [-f filter] [--whole] [--peak]   (--peak: print the measured FMA peak only)
//
// Threads: "1" one GEMM on one thread; "2x1" two GEMMs at once on one thread each (what cpu:2 x
// 1 thread runs: one replica per core); "1x2" one GEMM on two threads (cpu:1 x 2 threads).
// Shapes are column-major, as the conv engine calls them: forward Y[rows, M] = col[rows, K] W[K, M],
// dW[K, M] += col^T dY (reduction over rows), dX col[rows, K] = dY[rows, M] W^T; rows = the pixels
// of the images one GEMM covers (the engine's chunk, or all the replica's images with --whole).
// The batch is a replica's share with cpu:2 at the d2l batch sizes (-b overrides).
// False positives inside Eigen's AVX-512 code (GCC 12: `__m512 __Y = __Y;` in its intrinsics), as in gemm.cc.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#ifdef GR_BENCH_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif
#ifdef GR_BENCH_BLIS
#include <blis.h>
#endif
#ifdef GR_BENCH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef GR_BENCH_XSMM
#include <libxsmm.h>
#endif

#include "runtime/kernels/cpu/gemm.h"

namespace {

using Clock = std::chrono::steady_clock;

// One column-major single-precision GEMM: C[m, n] = op(A) op(B) + beta C.
struct Gemm {
  bool ta, tb;
  int64_t m, n, k;
  float beta;
  double flops() const { return 2.0 * m * n * k; }
};

struct Lib {
  std::string name;
  std::function<void(int threads)> set_threads;  // library-internal threads for the next calls
  // False where the library cannot run this shape (printed as "-").
  std::function<bool(const Gemm&, const float*, int64_t, const float*, int64_t, float*, int64_t)> run;
};

template <class T> using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
using Stride = Eigen::OuterStride<>;

std::vector<Lib> libraries() {
  std::vector<Lib> libs;
  libs.push_back({"eigen", [](int t) { Eigen::setNbThreads(t); },
                  [](const Gemm& g, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
                    Eigen::Map<const Mat<float>, 0, Stride> A(a, g.ta ? g.k : g.m, g.ta ? g.m : g.k, Stride(lda));
                    Eigen::Map<const Mat<float>, 0, Stride> B(b, g.tb ? g.n : g.k, g.tb ? g.k : g.n, Stride(ldb));
                    Eigen::Map<Mat<float>, 0, Stride> C(c, g.m, g.n, Stride(ldc));
                    if (g.beta == 0) {
                      if (!g.ta && !g.tb) C.noalias() = A * B;
                      else if (g.ta && !g.tb) C.noalias() = A.transpose() * B;
                      else if (!g.ta) C.noalias() = A * B.transpose();
                      else C.noalias() = A.transpose() * B.transpose();
                    } else {
                      if (!g.ta && !g.tb) C.noalias() += A * B;
                      else if (g.ta && !g.tb) C.noalias() += A.transpose() * B;
                      else if (!g.ta) C.noalias() += A * B.transpose();
                      else C.noalias() += A.transpose() * B.transpose();
                    }
                    return true;
                  }});
  static int graphrun_threads = 1;
  libs.push_back({"graphrun", [](int t) { graphrun_threads = t; },
                  [](const Gemm& g, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
                    graphrun::runtime::cpu::sgemm(g.ta, g.tb, g.m, g.n, g.k, 1.f, a, lda, b, ldb, g.beta, c, ldc,
                                                  graphrun_threads);
                    return true;
                  }});
#ifdef GR_BENCH_OPENBLAS
  libs.push_back({"openblas", [](int t) { openblas_set_num_threads(t); },
                  [](const Gemm& g, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
                    cblas_sgemm(CblasColMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                                g.m, g.n, g.k, 1.f, a, lda, b, ldb, g.beta, c, ldc);
                    return true;
                  }});
#endif
#ifdef GR_BENCH_BLIS
  libs.push_back({"blis", [](int t) { bli_thread_set_num_threads(t); },
                  [](const Gemm& g, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
                    float one = 1, beta = g.beta;
                    bli_sgemm(g.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g.m,
                              g.n, g.k, &one, const_cast<float*>(a), 1, lda, const_cast<float*>(b), 1, ldb, &beta, c, 1,
                              ldc);
                    return true;
                  }});
#endif
#ifdef GR_BENCH_DNNL
  // oneDNN's GEMM is row-major: column-major C = op(A) op(B) is row-major C^T = op(B)^T op(A)^T.
  libs.push_back({"onednn", [](int t) { omp_set_num_threads(t); },
                  [](const Gemm& g, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
                    return dnnl_sgemm(g.tb ? 'T' : 'N', g.ta ? 'T' : 'N', g.n, g.m, g.k, 1.f, b, ldb, a, lda, g.beta, c,
                                      ldc) == dnnl_success;
                  }});
#endif
#ifdef GR_BENCH_XSMM
  // libxsmm's JIT kernels take no transposes of A: tiles of kXsmmRows rows, one kernel per shape.
  libs.push_back({"libxsmm", [](int) {},
                  [](const Gemm& g, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
                    if (g.ta) return false;
                    constexpr int64_t kRows = 64;
                    const int flags = g.tb ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
                    const float one = 1, beta = g.beta;
                    for (int64_t i = 0; i < g.m; i += kRows) {
                      const libxsmm_blasint mm = std::min(kRows, g.m - i), n = g.n, k = g.k, la = lda, lb = ldb, lc = ldc;
                      libxsmm_smmfunction f = libxsmm_smmdispatch(mm, n, k, &la, &lb, &lc, &one, &beta, &flags, nullptr);
                      if (!f) return false;
                      f(a + i, b, c + i);
                    }
                    return true;
                  }});
#endif
  return libs;
}

double cpu_seconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The FMA peak of one core: 12 independent chains of vector FMAs (more than latency x FMA ports on
// current x86 cores), kept in registers; the cheapest of many short bursts in thread CPU time, so
// that a busy machine still shows what a core can do.
#ifdef __AVX512F__
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vset(float x) { return _mm512_set1_ps(x); }
#else
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vset(float x) { return _mm256_set1_ps(x); }
#endif

__attribute__((noinline)) Vec fma_burst(int iters, float seed) {
  const Vec x = vset(0.999999f), y = vset(1e-7f);
  Vec a0 = vset(seed), a1 = vset(seed + 1), a2 = vset(seed + 2), a3 = vset(seed + 3), a4 = vset(seed + 4),
      a5 = vset(seed + 5), a6 = vset(seed + 6), a7 = vset(seed + 7), a8 = vset(seed + 8), a9 = vset(seed + 9),
      a10 = vset(seed + 10), a11 = vset(seed + 11);
  for (int it = 0; it < iters; ++it) {
    a0 = vfma(a0, x, y); a1 = vfma(a1, x, y); a2 = vfma(a2, x, y); a3 = vfma(a3, x, y);
    a4 = vfma(a4, x, y); a5 = vfma(a5, x, y); a6 = vfma(a6, x, y); a7 = vfma(a7, x, y);
    a8 = vfma(a8, x, y); a9 = vfma(a9, x, y); a10 = vfma(a10, x, y); a11 = vfma(a11, x, y);
  }
  a0 = vfma(a0, a1, a2); a3 = vfma(a3, a4, a5); a6 = vfma(a6, a7, a8); a9 = vfma(a9, a10, a11);
  return vfma(vfma(a0, a3, a6), a9, y);
}

double fma_peak_gflops(double seconds) {
  constexpr int kIters = 1 << 14, kChains = 12;
  double best = 0;
  float sink = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    const double t0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    Vec v = fma_burst(kIters, sink);
    asm volatile("" : "+x"(v) : : "memory");  // the burst must finish before the clock is read
    const double dt = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
    alignas(64) float out[kLanes];
    std::memcpy(out, &v, sizeof(out));
    sink = out[0] * 1e-30f;
    best = std::max(best, 2.0 * kLanes * kChains * kIters / dt * 1e-9);
  }
  return best;
}

struct Conv {
  const char* model;
  const char* name;
  int64_t C, M, P, K;  // input channels, output channels, output pixels per image, C * kernel taps
};

// Per-replica shapes of the three models (28x28 inputs).
std::vector<Conv> convs() {
  return {
      {"lenet", "conv1 1->20 3x3 26x26", 1, 20, 676, 9},
      {"lenet", "conv2 20->50 5x5 9x9", 20, 50, 81, 500},
      {"simplecnn", "conv 1->10 5x5 24x24", 1, 10, 576, 25},
      {"resnet18", "stem 1->64 3x3 28x28", 1, 64, 784, 9},
      {"resnet18", "s1 64->64 3x3 28x28", 64, 64, 784, 576},
      {"resnet18", "s2a 64->128 3x3/2 14x14", 64, 128, 196, 576},
      {"resnet18", "s2 128->128 3x3 14x14", 128, 128, 196, 1152},
      {"resnet18", "s2sc 64->128 1x1/2 14x14", 64, 128, 196, 64},
      {"resnet18", "s3a 128->256 3x3/2 7x7", 128, 256, 49, 1152},
      {"resnet18", "s3 256->256 3x3 7x7", 256, 256, 49, 2304},
      {"resnet18", "s3sc 128->256 1x1/2 7x7", 128, 256, 49, 128},
      {"resnet18", "s4a 256->512 3x3/2 4x4", 256, 512, 16, 2304},
      {"resnet18", "s4 512->512 3x3 4x4", 512, 512, 16, 4608},
      {"resnet18", "s4sc 256->512 1x1/2 4x4", 256, 512, 16, 256},
  };
}

struct Fc {
  const char* model;
  const char* name;
  int64_t in, out;
};

std::vector<Fc> fcs() {
  return {{"lenet", "fc1 800->128", 800, 128}, {"lenet", "fc2 128->10", 128, 10},
          {"simplecnn", "fc 1440->10", 1440, 10}, {"resnet18", "fc 512->10", 512, 10}};
}

// Images per GEMM as the conv engine's chunk planner picks them (conv.cc plan_chunks, one thread).
int64_t chunk_images(int64_t batch, int64_t P, int64_t K) {
  const int64_t bytes = P * K * 4;
  if (P >= 256) return 1;
  const int64_t by_rows = std::min<int64_t>((256 + P - 1) / P, (int64_t{32} << 20) / bytes);
  return std::clamp<int64_t>(std::max<int64_t>((int64_t{512} << 10) / bytes, by_rows), 1, batch);
}

struct Case {
  std::string model, name;
  Gemm g;
};

// Images per replica with cpu:2 at the d2l batch sizes (LeNet and ResNet-18 256, SimpleCNN 64).
int64_t replica_batch(const std::string& model) { return model == "simplecnn" ? 32 : 128; }

std::vector<Case> cases(const std::vector<std::string>& models, int64_t batch_flag, bool whole) {
  std::vector<Case> out;
  auto wanted = [&](const char* m) { return models.empty() || std::find(models.begin(), models.end(), m) != models.end(); };
  for (const Conv& c : convs()) {
    if (!wanted(c.model)) continue;
    const int64_t batch = batch_flag ? batch_flag : replica_batch(c.model);
    const int64_t rows = c.P * (whole ? batch : chunk_images(batch, c.P, c.K));
    const std::string tag = std::string(c.name) + " rows " + std::to_string(rows);
    out.push_back({c.model, tag + " fwd", {false, false, rows, c.M, c.K, 0.f}});
    out.push_back({c.model, tag + " dW", {true, false, c.K, c.M, rows, 1.f}});
    if (c.C > 1) out.push_back({c.model, tag + " dX", {false, true, rows, c.K, c.M, 0.f}});
  }
  // Gemm layers, row-major [batch, in] x [in, out] seen column-major: Y^T[out, batch] = W^T X^T.
  for (const Fc& f : fcs()) {
    if (!wanted(f.model)) continue;
    const int64_t batch = batch_flag ? batch_flag : replica_batch(f.model);
    out.push_back({f.model, std::string(f.name) + " fwd", {false, false, f.out, batch, f.in, 0.f}});
    out.push_back({f.model, std::string(f.name) + " dW", {false, true, f.out, f.in, batch, 0.f}});
    out.push_back({f.model, std::string(f.name) + " dX", {true, false, f.in, batch, f.out, 0.f}});
  }
  return out;
}

struct Buffers {
  std::vector<float> a, b, c;
  int64_t lda, ldb, ldc;
  explicit Buffers(const Gemm& g) {
    lda = g.ta ? g.k : g.m;
    ldb = g.tb ? g.n : g.k;
    ldc = g.m;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1, 1);
    a.resize(lda * (g.ta ? g.m : g.k));
    b.resize(ldb * (g.tb ? g.k : g.n));
    c.resize(ldc * g.n);
    for (auto& x : a) x = d(rng);
    for (auto& x : b) x = d(rng);
    for (auto& x : c) x = d(rng) * 1e-3f;
  }
};

// Seconds of the cheapest call (of as many as fit in `seconds`, at least 3; -1 where the library
// cannot run the shape). "1" and "2x1" count the calling thread's CPU time, not wall time: on a
// machine shared with other work a call that spans a scheduler time slice would otherwise count the
// other processes' turns (in "2x1" two threads each run their own GEMM at once, the dearer of each
// pair counts). "1x2" counts wall time (the library's worker threads, and every other library's
// spinning ones, would count in the process's CPU time): on a busy machine it reads low.
double time_gemm(const Lib& lib, const Gemm& g, const std::string& mode, double seconds) {
  const int copies = mode == "2x1" ? 2 : 1;
  lib.set_threads(mode == "1x2" ? 2 : 1);
  std::vector<Buffers> bufs;
  for (int i = 0; i < copies; ++i) bufs.emplace_back(g);
  auto once = [&](int i) {
    return lib.run(g, bufs[i].a.data(), bufs[i].lda, bufs[i].b.data(), bufs[i].ldb, bufs[i].c.data(), bufs[i].ldc);
  };
  if (!once(0)) return -1;
  const clockid_t clock = mode == "1x2" ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
  double best = 1e30;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (int r = 0; r < 3 || Clock::now() < end; ++r) {
    double dt;
    if (copies == 1) {
      const double t0 = cpu_seconds(clock);
      once(0);
      dt = cpu_seconds(clock) - t0;
    } else {
      double dts[2];
#pragma omp parallel num_threads(2)
      {
        const int t = omp_get_thread_num();
#pragma omp barrier
        const double t0 = cpu_seconds(clock);
        once(t);
        dts[t] = cpu_seconds(clock) - t0;
      }
      dt = std::max(dts[0], dts[1]);
    }
    best = std::min(best, dt);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models, only_libs, modes;
  int64_t batch = 0;  // 0: replica_batch of each model
  double seconds = 0.3;
  bool whole = false, peak_only = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "bench_gemm: %s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "-m") models.push_back(next());
    else if (a == "-l") only_libs.push_back(next());
    else if (a == "-t") modes.push_back(next());
    else if (a == "-b") batch = std::atoll(next().c_str());
    else if (a == "-s") seconds = std::atof(next().c_str());
    else if (a == "-f") filter = next();
    else if (a == "--whole") whole = true;
    else if (a == "--peak") peak_only = true;
    else { std::fprintf(stderr, "bench_gemm: unknown argument %s (see the file's head)\n", a.c_str()); return 2; }
  }
  if (modes.empty()) modes = {"1", "2x1"};
#ifdef GR_BENCH_XSMM
  libxsmm_init();
#endif
  std::vector<Lib> libs;
  for (Lib& l : libraries())
    if (only_libs.empty() || std::find(only_libs.begin(), only_libs.end(), l.name) != only_libs.end()) libs.push_back(l);
  const double peak = fma_peak_gflops(0.5);
  double peak2[2];
#pragma omp parallel num_threads(2)
  peak2[omp_get_thread_num()] = fma_peak_gflops(0.5);
  std::printf("FMA peak, one core: %.1f GFLOP/s (fp32); two threads at once: %.1f and %.1f per thread\n", peak,
              peak2[0], peak2[1]);
  if (peak_only) return 0;
  std::printf("%-10s %-48s %5s %6s %6s %6s %4s", "model", "shape", "op", "m", "n", "k", "thr");
  for (const Lib& l : libs) std::printf(" %9s", l.name.c_str());
  std::printf("   (GFLOP/s per core; %% of peak for the best)\n");
  for (const std::string& mode : modes)
    for (const Case& c : cases(models, batch, whole)) {
      if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
      const char* op = c.g.ta ? (c.g.tb ? "TT" : "TN") : (c.g.tb ? "NT" : "NN");
      std::printf("%-10s %-48s %5s %6lld %6lld %6lld %4s", c.model.c_str(), c.name.c_str(), op,
                  static_cast<long long>(c.g.m), static_cast<long long>(c.g.n), static_cast<long long>(c.g.k), mode.c_str());
      double best = 0;
      for (const Lib& l : libs) {
        const double s = time_gemm(l, c.g, mode, seconds);
        if (s < 0) {
          std::printf(" %9s", "-");
          continue;
        }
        const double per_core = c.g.flops() / s * 1e-9 / (mode == "1x2" ? 2 : 1);
        best = std::max(best, per_core);
        std::printf(" %9.1f", per_core);
        std::fflush(stdout);
      }
      std::printf("   %3.0f%%\n", 100 * best / peak);
    }
  return 0;
}
