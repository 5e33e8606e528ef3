// cuBLAS, loaded on first use instead of at program start.
//
// Linking libcublas and libcublasLt costs every process ~0.08 s before main (mapping and relocating ~0.6 GB of
// shared objects), paid by each `moe-oracle` command and each mpirun rank although only `--kernels cuda` calls
// cuBLAS. So nothing links it: the first DeviceContext dlopens libcublas.so.<major of the headers> (the loader's
// search path first, then the toolkit directory CMake found) and resolves the handful of entry points we call.
// Types and enums still come from <cublas_v2.h>; only the calls go through here.
#pragma once

#include <cublas_v2.h>

namespace moe::cuda {

struct CublasLibrary {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSetMathMode) set_math_mode;
  // The exported cublasGemmEx (the header also has an inline C++ overload taking a legacy compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&::cublasGetStatusString) status_string;
  // cuBLAS >= 12.5 only; nullptr where the loaded library lacks it (GroupedGemm::one_launch then refuses).
  decltype(&::cublasGemmGroupedBatchedEx) gemm_grouped_batched_ex;
};

// Loads the library once (thread-safe) and returns its entry points; throws std::runtime_error naming the file
// (and dlerror()'s reason) when the library cannot be loaded, or the symbol when one is missing.
const CublasLibrary& cublas();

}  // namespace moe::cuda
