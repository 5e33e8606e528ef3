#include "cuda/device_probe.hpp"

#include <cuda_runtime.h>

namespace moe::cuda {
namespace {

__global__ void axpb_kernel(int n, double a, double b, double* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * i + b;
}

}  // namespace

int visible_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

bool axpb_roundtrip(int n, double a, double b, double* out) {
  double* device = nullptr;
  const size_t bytes = sizeof(double) * static_cast<size_t>(n);
  if (cudaMalloc(&device, bytes) != cudaSuccess) return false;
  axpb_kernel<<<(n + 255) / 256, 256>>>(n, a, b, device);
  const bool ok = cudaGetLastError() == cudaSuccess &&
                  cudaMemcpy(out, device, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(device);
  return ok;
}

}  // namespace moe::cuda
