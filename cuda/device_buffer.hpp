// DeviceBuffer<T>: n elements of T in device memory, owned (move-only), with blocking host copies for tests and
// setup. Two allocation modes:
//   DeviceBuffer(n)          cudaMalloc / cudaFree: usable from any stream; freeing synchronises the device;
//   DeviceBuffer(n, stream)  cudaMallocAsync / cudaFreeAsync, ordered on `stream`: cheap workspace inside a
//                            stream's sequence of kernels (use it on that stream only).
// span() hands device pointers to APIs taking spans (the NCCL communicator); never dereference them on the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace moe::cuda {

// Untyped primitives behind DeviceBuffer (device_buffer.cpp); they throw on CUDA errors.
void* device_allocate(std::size_t bytes, cudaStream_t stream, bool stream_ordered);
void device_release(void* data, cudaStream_t stream, bool stream_ordered) noexcept;
void copy_to_device(void* device, const void* host, std::size_t bytes);
void copy_to_host(void* host, const void* device, std::size_t bytes);
void fill_zero(void* device, std::size_t bytes, cudaStream_t stream);

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : size_(n), data_(static_cast<T*>(device_allocate(n * sizeof(T), nullptr, false))) {}
  DeviceBuffer(std::size_t n, cudaStream_t stream)
      : size_(n),
        stream_(stream),
        stream_ordered_(true),
        data_(static_cast<T*>(device_allocate(n * sizeof(T), stream, true))) {}
  static DeviceBuffer from_host(std::span<const T> host) {
    DeviceBuffer b(host.size());
    copy_to_device(b.data_, host.data(), host.size_bytes());
    return b;
  }

  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer(std::move(o)).swap(*this);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { device_release(data_, stream_, stream_ordered_); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }

  void upload(std::span<const T> host) {
    if (host.size() != size_) throw_size_mismatch(host.size());
    copy_to_device(data_, host.data(), host.size_bytes());
  }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    copy_to_host(host.data(), data_, size_ * sizeof(T));
    return host;
  }
  void zero(cudaStream_t stream = nullptr) { fill_zero(data_, size_ * sizeof(T), stream); }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(size_, o.size_);
    std::swap(stream_, o.stream_);
    std::swap(stream_ordered_, o.stream_ordered_);
    std::swap(data_, o.data_);
  }
  [[noreturn]] void throw_size_mismatch(std::size_t host_size) const;

  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  bool stream_ordered_ = false;
  T* data_ = nullptr;
};

[[noreturn]] void throw_buffer_size_mismatch(std::size_t device_size, std::size_t host_size);

template <typename T>
void DeviceBuffer<T>::throw_size_mismatch(std::size_t host_size) const {
  throw_buffer_size_mismatch(size_, host_size);
}

}  // namespace moe::cuda
