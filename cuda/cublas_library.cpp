#include "cuda/cublas_library.hpp"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace moe::cuda {
namespace {

#define MOE_STRINGIFY2(x) #x
#define MOE_STRINGIFY(x) MOE_STRINGIFY2(x)
// The soname of the cuBLAS the headers describe: a library of another major version has another ABI.
constexpr const char* kSoname = "libcublas.so." MOE_STRINGIFY(CUBLAS_VER_MAJOR);

void* open_library() {
  if (void* h = ::dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  std::string why = ::dlerror();
#ifdef MOE_CUBLAS_DIR
  const std::string fallback = std::string(MOE_CUBLAS_DIR) + "/" + kSoname;
  if (void* h = ::dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  why += "; " + std::string(::dlerror());
#endif
  throw std::runtime_error(std::string("cuBLAS: cannot load ") + kSoname + " (" + why + ")");
}

template <typename F>
void resolve(void* library, const char* name, F& into) {
  void* symbol = ::dlsym(library, name);
  if (symbol == nullptr) throw std::runtime_error(std::string("cuBLAS: ") + kSoname + " has no symbol " + name);
  into = reinterpret_cast<F>(symbol);
}

CublasLibrary load() {
  void* library = open_library();  // kept open for the life of the process
  CublasLibrary l{};
  resolve(library, "cublasCreate_v2", l.create);
  resolve(library, "cublasDestroy_v2", l.destroy);
  resolve(library, "cublasSetStream_v2", l.set_stream);
  resolve(library, "cublasSetMathMode", l.set_math_mode);
  resolve(library, "cublasGemmEx", l.gemm_ex);
  resolve(library, "cublasGetStatusString", l.status_string);
  l.gemm_grouped_batched_ex =
      reinterpret_cast<decltype(l.gemm_grouped_batched_ex)>(::dlsym(library, "cublasGemmGroupedBatchedEx"));
  return l;
}

}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary library = load();  // a failed load throws and is retried by the next caller
  return library;
}

}  // namespace moe::cuda
