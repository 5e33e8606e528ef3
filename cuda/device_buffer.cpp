#include "cuda/device_buffer.hpp"

#include "cuda/cuda_error.hpp"

#include <stdexcept>
#include <string>

namespace moe::cuda {

void* device_allocate(std::size_t bytes, cudaStream_t stream, bool stream_ordered) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  if (stream_ordered) MOE_CUDA_CHECK(cudaMallocAsync(&p, bytes, stream));
  else MOE_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

// Destructors must not throw: a failed free (only possible after a sticky device error) is ignored here, and the
// error surfaces at the next checked call.
void device_release(void* data, cudaStream_t stream, bool stream_ordered) noexcept {
  if (data == nullptr) return;
  if (stream_ordered) (void)cudaFreeAsync(data, stream);
  else (void)cudaFree(data);
}

void copy_to_device(void* device, const void* host, std::size_t bytes) {
  if (bytes > 0) MOE_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* host, const void* device, std::size_t bytes) {
  if (bytes > 0) MOE_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

void fill_zero(void* device, std::size_t bytes, cudaStream_t stream) {
  if (bytes > 0) MOE_CUDA_CHECK(cudaMemsetAsync(device, 0, bytes, stream));
}

void throw_buffer_size_mismatch(std::size_t device_size, std::size_t host_size) {
  throw std::invalid_argument("DeviceBuffer::upload: the host data has " + std::to_string(host_size) +
                              " elements, the buffer " + std::to_string(device_size) +
                              " (an upload fills the buffer exactly)");
}

}  // namespace moe::cuda
