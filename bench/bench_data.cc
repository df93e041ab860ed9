// Data-source benchmark: one shuffled epoch of Fashion-MNIST batches read from the MNIST files, and
// from the same data re-exported as .npz (stored and deflated), a .npy folder and a PNG class-folder
// tree; for the PNG tree, how long a step would wait for data behind N loader threads.
//   bench_data [OUT_DIR] [STEP_MS]     (OUT_DIR: where the exports are written, reused when present)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "graph/tensor_io.h"
#include "runtime/data/fit.h"
#include "runtime/data/image.h"
#include "runtime/data/loader.h"

using namespace graphrun;
using namespace graphrun::runtime::data;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void export_all(const Dataset& ds, const std::string& out) {
  const int64_t n = ds.size();
  if (!fs::exists(out + "/npy/labels.npy")) {
    fs::create_directories(out + "/npy");
    Tensor u8(DType::U8, {n, 1, 28, 28});
    const float* p = ds.images.data<float>();
    for (int64_t i = 0; i < u8.numel(); ++i) u8.data<uint8_t>()[i] = static_cast<uint8_t>(std::lround(p[i] * 255.f));
    write_npy(out + "/npy/image.npy", u8);
    write_npy(out + "/npy/labels.npy", ds.labels);
  }
  if (!fs::exists(out + "/packed.npz")) {
    const std::string cmd = "/usr/bin/python3 -c \"import numpy as np; d = '" + out +
                            "'; x = np.load(d + '/npy/image.npy'); y = np.load(d + '/npy/labels.npy'); "
                            "np.savez(d + '/plain.npz', image=x, labels=y); "
                            "np.savez_compressed(d + '/packed.npz', image=x, labels=y)\"";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "bench_data: numpy export failed\n");
  }
  if (!fs::exists(out + "/png/9")) {
    Image img{28, 28, 1, std::vector<uint8_t>(784)};
    const float* p = ds.images.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      for (int k = 0; k < 784; ++k) img.pixels[k] = static_cast<uint8_t>(std::lround(p[i * 784 + k] * 255.f));
      const std::string cls = out + "/png/" + std::to_string(ds.labels.data<int64_t>()[i]);
      fs::create_directories(cls);
      write_png(cls + "/" + std::to_string(i) + ".png", img);
    }
  }
}

// One epoch of batches of 256 through a Loader; returns (seconds, seconds waited for data).
std::pair<double, double> epoch(SourcePtr src, int threads, double step_ms) {
  LoaderOptions o;
  o.threads = threads;
  o.seed = 1;
  Loader loader(src, o);
  const auto t0 = std::chrono::steady_clock::now();
  loader.start(0);
  for (int64_t s = 0; s < loader.steps_per_epoch(); ++s) {
    loader.next();
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(step_ms * 1000)));
  }
  return {seconds_since(t0), loader.wait_seconds()};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string out = argc > 1 ? argv[1] : "bench_data_out";
    const double step_ms = argc > 2 ? std::atof(argv[2]) : 100.0;
    Dataset ds = load_split(kDefaultDataDir, "train");
    export_all(ds, out);
    const std::vector<InputSpec> lenet{{"x", DType::F32, {1, 28, 28}}};
    FitOptions fo;
    fo.num_classes = 10;
    std::printf("one shuffled epoch of %lld examples, batches of 256, read on the caller's thread:\n",
                static_cast<long long>(ds.size()));
    {
      // Today's trainer path: epoch_order + gather.
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<int64_t> order = epoch_order(ds.size(), 1, 0);
      Tensor x(DType::F32, {256, 1, 28, 28}), y(DType::I64, {256});
      for (int64_t b = 0; b < ds.size(); b += 256) {
        const int64_t n = std::min<int64_t>(256, ds.size() - b);
        Tensor xs = Tensor::view(DType::F32, {n, 1, 28, 28}, x.raw()), ys = Tensor::view(DType::I64, {n}, y.raw());
        gather(ds, order.data() + b, n, xs, ys);
      }
      std::printf("  %-28s %7.3f s\n", "IDX (gather)", seconds_since(t0));
    }
    for (const char* name : {"plain.npz", "packed.npz", "npy"}) {
      const auto t0 = std::chrono::steady_clock::now();
      SourcePtr s = fit_to_model(open_source(out + "/" + name), lenet, fo);
      const double open_s = seconds_since(t0);
      std::printf("  %-28s %7.3f s   (open and check: %.3f s)\n", name, epoch(s, 0, 0).first, open_s);
    }
    const auto t0 = std::chrono::steady_clock::now();
    SourcePtr png = fit_to_model(open_source(out + "/png", {1, 28, 28}), lenet, fo);
    std::printf("  %-28s %7.3f s   (open and check: %.3f s)\n", "png folder (decode)", epoch(png, 0, 0).first,
                seconds_since(t0));
    std::printf("PNG folder behind a %.0f ms step: time each step waits for data\n", step_ms);
    for (int threads : {1, 2}) {
      auto [total, wait] = epoch(png, threads, step_ms);
      std::printf("  %d loader thread%s: epoch %.1f s, waited %.3f s in all (%.2f ms a step)\n", threads,
                  threads > 1 ? "s" : "", total, wait, 1000 * wait / std::ceil(ds.size() / 256.0));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_data: %s\n", e.what());
    return 2;
  }
}
