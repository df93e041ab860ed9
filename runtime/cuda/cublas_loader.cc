// cuBLAS, loaded on first use. Linking libcublas made every graphrun process, GPU or not, pay its
// loader and static constructors at start: about 0.85 s on the development machine (libcublasLt),
// for `graphrun --help` as for a CPU training run, and 40 times that for a test suite that starts
// graphrun hundreds of times. graphrun calls seven cuBLAS functions; they are defined here with the
// library's own signatures, and each forwards to the library's symbol, which dlopen resolves when a
// CUDA device first needs it. A machine without the library gets CUBLAS_STATUS_NOT_INITIALIZED from
// cublasCreate, which GR_CUBLAS_CHECK turns into one line naming the library and dlerror's reason.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "runtime/device.h"

namespace {

struct Library {
  void* handle = nullptr;
  std::string error;
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    l.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef GRAPHRUN_CUBLAS_DIR
    if (!l.handle) l.handle = dlopen((std::string(GRAPHRUN_CUBLAS_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (!l.handle) {
      const char* e = dlerror();
      l.error = name + " could not be loaded (" + (e ? e : "unknown reason") + ")";
    }
    return l;
  }();
  return lib;
}

// The library's function `name`, of the type of graphrun's declaration F; null when it is missing.
template <class F>
F* symbol(const char* name) {
  const Library& l = library();
  return l.handle ? reinterpret_cast<F*>(dlsym(l.handle, name)) : nullptr;
}

}  // namespace

namespace graphrun::runtime {

bool cublas_loadable(std::string* why) {
  if (library().handle && symbol<decltype(cublasGetStatusString)>("cublasGetStatusString")) return true;
  if (why) *why = library().error.empty() ? "cuBLAS lacks cublasGetStatusString" : library().error;
  return false;
}

}  // namespace graphrun::runtime

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  static auto* f = symbol<decltype(cublasCreate_v2)>("cublasCreate_v2");
  if (!f) {
    std::fprintf(stderr, "graphrun: %s\n",
                 library().error.empty() ? "cuBLAS lacks cublasCreate_v2" : library().error.c_str());
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  return f(handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  static auto* f = symbol<decltype(cublasSetStream_v2)>("cublasSetStream_v2");
  return f ? f(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static auto* f = symbol<decltype(cublasGetStatusString)>("cublasGetStatusString");
  if (f) return f(status);
  return library().error.empty() ? "cuBLAS error" : library().error.c_str();
}

cublasStatus_t CUBLASWINAPI cublasSscal_v2(cublasHandle_t handle, int n, const float* alpha, float* x, int incx) {
  static auto* f = symbol<decltype(cublasSscal_v2)>("cublasSscal_v2");
  return f ? f(handle, n, alpha, x, incx) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  static auto* f = symbol<decltype(cublasSgemm_v2)>("cublasSgemm_v2");
  return f ? f(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const double* alpha, const double* A, int lda,
                                           const double* B, int ldb, const double* beta, double* C, int ldc) {
  static auto* f = symbol<decltype(cublasDgemm_v2)>("cublasDgemm_v2");
  return f ? f(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k,
                                                      const float* alpha, const float* A, int lda,
                                                      long long int strideA, const float* B, int ldb,
                                                      long long int strideB, const float* beta, float* C, int ldc,
                                                      long long int strideC, int batchCount) {
  static auto* f = symbol<decltype(cublasSgemmStridedBatched)>("cublasSgemmStridedBatched");
  return f ? f(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
               batchCount)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // extern "C"
