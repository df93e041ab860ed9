# The CUDA backend's build: finds nvcc, cuDNN and NCCL (under /usr/local/cuda by default), sets
# GRAPHRUN_CUDA (ON when all are found) and defines the object library graphrun_cuda when ON.
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)

set(GRAPHRUN_CUDA_FOUND FALSE)
set(GRAPHRUN_CUDA_MISSING "")
if(CMAKE_CUDA_COMPILER)
  get_filename_component(_gr_cuda_root "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  get_filename_component(_gr_cuda_root "${_gr_cuda_root}" DIRECTORY)
  find_package(CUDAToolkit QUIET)
  find_library(GRAPHRUN_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${_gr_cuda_root}/lib64 /usr/local/cuda/lib64)
  find_path(GRAPHRUN_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_gr_cuda_root}/include /usr/local/cuda/include)
  find_library(GRAPHRUN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${_gr_cuda_root}/lib64 /usr/local/cuda/lib64)
  find_path(GRAPHRUN_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_gr_cuda_root}/include /usr/local/cuda/include)
  if(NOT CUDAToolkit_FOUND)
    list(APPEND GRAPHRUN_CUDA_MISSING "CUDA toolkit libraries")
  endif()
  if(NOT GRAPHRUN_CUDNN_LIBRARY OR NOT GRAPHRUN_CUDNN_INCLUDE)
    list(APPEND GRAPHRUN_CUDA_MISSING "cuDNN (libcudnn, cudnn.h)")
  endif()
  if(NOT GRAPHRUN_NCCL_LIBRARY OR NOT GRAPHRUN_NCCL_INCLUDE)
    list(APPEND GRAPHRUN_CUDA_MISSING "NCCL (libnccl, nccl.h)")
  endif()
  if(NOT GRAPHRUN_CUDA_MISSING)
    set(GRAPHRUN_CUDA_FOUND TRUE)
  endif()
else()
  list(APPEND GRAPHRUN_CUDA_MISSING "nvcc")
endif()

option(GRAPHRUN_CUDA "Build the CUDA backend (cuDNN, cuBLAS, NCCL)" ${GRAPHRUN_CUDA_FOUND})
if(GRAPHRUN_CUDA AND NOT GRAPHRUN_CUDA_FOUND)
  message(FATAL_ERROR "GRAPHRUN_CUDA is ON but not found: ${GRAPHRUN_CUDA_MISSING}")
endif()
if(NOT GRAPHRUN_CUDA)
  if(GRAPHRUN_CUDA_FOUND)
    message(STATUS "graphrun: CUDA backend off (GRAPHRUN_CUDA=OFF)")
  else()
    message(STATUS "graphrun: CUDA backend off: not found: ${GRAPHRUN_CUDA_MISSING}")
  endif()
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)  # Hopper (H100, H200): the GPUs we measure on
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
if(CCACHE_PROGRAM)
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()
enable_language(CUDA)
message(STATUS "graphrun: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_${CMAKE_CUDA_ARCHITECTURES}, "
               "cuDNN ${GRAPHRUN_CUDNN_LIBRARY}, NCCL ${GRAPHRUN_NCCL_LIBRARY})")

# runtime/cuda/ holds everything that needs the CUDA toolkit outside the kernels: the device, the
# NCCL and device-local communicators (runtime/comm/ stays free of CUDA).
file(GLOB GRAPHRUN_CUDA_SRC CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/runtime/cuda/*.cc ${CMAKE_SOURCE_DIR}/runtime/cuda/*.cu
     ${CMAKE_SOURCE_DIR}/runtime/kernels/cuda/*.cu ${CMAKE_SOURCE_DIR}/runtime/kernels/cuda/*.cc)
list(FILTER GRAPHRUN_CUDA_SRC EXCLUDE REGEX "/runtime/cuda/no_cuda\\.cc$")
add_library(graphrun_cuda OBJECT ${GRAPHRUN_CUDA_SRC})
target_include_directories(graphrun_cuda PUBLIC ${CMAKE_SOURCE_DIR} ${GRAPHRUN_CUDNN_INCLUDE} ${GRAPHRUN_NCCL_INCLUDE})
# cuBLAS is not linked: runtime/cuda/cublas_loader.cc opens it when a device first needs it, since
# loading it costs every process, GPU or not, most of a second at start. Its folder is the fallback
# when the loader's search path does not find it.
target_link_libraries(graphrun_cuda PUBLIC graphrun_graph CUDA::cudart
                      ${GRAPHRUN_CUDNN_LIBRARY} ${GRAPHRUN_NCCL_LIBRARY} ${CMAKE_DL_LIBS})
set_property(SOURCE ${CMAKE_SOURCE_DIR}/runtime/cuda/cublas_loader.cc APPEND PROPERTY COMPILE_DEFINITIONS
             GRAPHRUN_CUBLAS_DIR="${CUDAToolkit_LIBRARY_DIR}")
