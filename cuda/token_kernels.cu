// Kernels of token_kernels.hpp. Launch shapes: one block per expert for the permutation (a block-wide ordered
// compaction over all slots: no atomics, so the order within an expert is the slot order), one block per output
// row for gathers and sums (threads across the row's width, vectorised for the plain copies).
#include "cuda/cuda_error.hpp"
#include "cuda/device_math.cuh"
#include "cuda/token_kernels.hpp"

#include <stdexcept>
#include <string>

namespace moe::cuda {
namespace {

constexpr int block_threads = 256;
constexpr int max_topk = 32;

// Sum of one int64 per thread over the block, in a fixed order; every thread gets the total.
__device__ std::int64_t block_sum(std::int64_t v, std::int64_t* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) scratch[threadIdx.x] += scratch[threadIdx.x + half];
    __syncthreads();
  }
  const std::int64_t total = scratch[0];
  __syncthreads();
  return total;
}

__global__ void count_experts_kernel(std::int64_t slots, const std::int32_t* topk, std::int64_t* counts) {
  __shared__ std::int64_t scratch[block_threads];
  const int e = blockIdx.x;
  std::int64_t c = 0;
  for (std::int64_t s = threadIdx.x; s < slots; s += blockDim.x) c += topk[s] == e;
  const std::int64_t total = block_sum(c, scratch);
  if (threadIdx.x == 0) counts[e] = total;
}

// Block e writes the rows of expert e: its base is the count of all lower experts, then slots in increasing order.
__global__ void place_slots_kernel(std::int64_t slots, const std::int32_t* topk, const std::int64_t* counts,
                                   std::int32_t* row_slot, std::int32_t* slot_row) {
  __shared__ std::int64_t scratch[block_threads];
  __shared__ int warp_total[block_threads / 32];
  const int e = blockIdx.x;
  std::int64_t lower = 0;
  for (int i = threadIdx.x; i < e; i += blockDim.x) lower += counts[i];
  std::int64_t next = block_sum(lower, scratch);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (std::int64_t start = 0; start < slots; start += blockDim.x) {
    const std::int64_t s = start + threadIdx.x;
    const bool mine = s < slots && topk[s] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int before = __popc(ballot & ((1u << lane) - 1u));
    int chunk = 0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) {
      if (w < warp) before += warp_total[w];
      chunk += warp_total[w];
    }
    if (mine) {
      const std::int64_t row = next + before;
      row_slot[row] = std::int32_t(s);
      slot_row[s] = std::int32_t(row);
    }
    next += chunk;
    __syncthreads();
  }
}

template <typename V>
__global__ void gather_rows_kernel(const V* x, std::int64_t row_vectors, const std::int32_t* index, int divisor,
                                   V* out) {
  const std::int64_t i = blockIdx.x;
  const V* src = x + std::int64_t(index[i] / divisor) * row_vectors;
  V* dst = out + i * row_vectors;
  for (std::int64_t c = threadIdx.x; c < row_vectors; c += blockDim.x) dst[c] = src[c];
}

// Token t's k (row, weight) pairs sorted by row, in shared memory, for the ordered sums of unpermute: the first k
// threads load them at once, thread 0 sorts (k <= 32, insertion sort).
template <typename A>
__device__ void sorted_sources(std::int64_t t, int k, const std::int32_t* slot_row, const A* probs, int* rows,
                               A* weights) {
  if (int(threadIdx.x) < k) {
    rows[threadIdx.x] = slot_row[t * k + threadIdx.x];
    weights[threadIdx.x] = probs != nullptr ? probs[t * k + threadIdx.x] : A(1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int j = 1; j < k; ++j) {
      const int r = rows[j];
      const A w = weights[j];
      int at = j;
      for (; at > 0 && rows[at - 1] > r; --at) {
        rows[at] = rows[at - 1];
        weights[at] = weights[at - 1];
      }
      rows[at] = r;
      weights[at] = w;
    }
  }
  __syncthreads();
}

// V consecutive elements of a row moved as one access: 16 bytes for 8 bf16, 4 floats or 2 doubles.
template <typename D, int V>
struct alignas(sizeof(D) * V) Pack {
  D v[V];
};

// One block per token; each thread sums V columns at a time over the token's k rows in row order, element by
// element exactly as the one-column form would (the packing changes the memory accesses, not the arithmetic).
template <typename D, typename A, int V>
__global__ void unpermute_kernel(const D* y, std::int64_t packs, int k, const std::int32_t* slot_row,
                                 const A* probs, D* out) {
  __shared__ int rows[max_topk];
  __shared__ A weights[max_topk];
  using P = Pack<D, V>;
  const std::int64_t t = blockIdx.x;
  sorted_sources(t, k, slot_row, probs, rows, weights);
  const P* y_packs = reinterpret_cast<const P*>(y);
  P* out_packs = reinterpret_cast<P*>(out);
  for (std::int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
    A acc[V];
    for (int e = 0; e < V; ++e) acc[e] = 0;
    for (int j = 0; j < k; ++j) {
      const P row = y_packs[std::int64_t(rows[j]) * packs + c];
      for (int e = 0; e < V; ++e) {
        const A v = load_acc(&row.v[e]);
        acc[e] = add_rn(acc[e], probs != nullptr ? mul_rn(weights[j], v) : v);
      }
    }
    P result;
    for (int e = 0; e < V; ++e) store_acc(&result.v[e], acc[e]);
    out_packs[t * packs + c] = result;
  }
}

template <typename D, typename A>
__global__ void unpermute_backward_kernel(const D* dout, const D* y, std::int64_t width, int k,
                                          const std::int32_t* slot_row, const A* probs, D* dy, A* dprobs) {
  __shared__ A warp_part[block_threads / 32];
  const std::int64_t s = blockIdx.x, t = s / k, row = slot_row[s];
  const A w = probs != nullptr ? probs[s] : A(1);
  A dot = 0;
  for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    const A g = load_acc(dout + t * width + c);
    store_acc(dy + row * width + c, probs != nullptr ? mul_rn(w, g) : g);
    if (dprobs != nullptr) dot = fma(g, load_acc(y + row * width + c), dot);
  }
  if (dprobs == nullptr) return;
  dot = warp_sum(dot);
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = dot;
  __syncthreads();
  if (threadIdx.x == 0) {
    A total = 0;
    for (int i = 0; i < int(blockDim.x / 32); ++i) total += warp_part[i];
    dprobs[s] = total;
  }
}

template <typename D, typename A>
__global__ void scatter_add_rows_kernel(const D* y, std::int64_t width, const std::int32_t* offsets,
                                        const std::int32_t* sources, const A* weights, D* out) {
  const std::int64_t o = blockIdx.x;
  const int begin = offsets[o], end = offsets[o + 1];
  if (begin == end) return;
  for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    A acc = load_acc(out + o * width + c);
    for (int i = begin; i < end; ++i) {
      const std::int64_t src = sources[i];
      const A v = load_acc(y + src * width + c);
      acc = add_rn(acc, weights != nullptr ? mul_rn(weights[src], v) : v);
    }
    store_acc(out + o * width + c, acc);
  }
}

template <typename F, typename T>
__global__ void convert_kernel(const F* in, T* out, std::int64_t count) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) store_acc(out + i, load_acc(in + i));
}

void check_grid(std::int64_t blocks, const char* what) {
  if (blocks > 0x7fffffff) throw std::invalid_argument(std::string(what) + ": more than 2^31 - 1 rows");
}

template <typename V>
void launch_gather(cudaStream_t stream, const void* x, std::size_t row_bytes, const std::int32_t* index,
                   std::int64_t rows, int divisor, void* out) {
  const auto vectors = std::int64_t(row_bytes / sizeof(V));
  const int threads = vectors >= block_threads ? block_threads : int((vectors + 31) / 32 * 32);
  gather_rows_kernel<V><<<unsigned(rows), threads, 0, stream>>>(static_cast<const V*>(x), vectors, index, divisor,
                                                                static_cast<V*>(out));
  check_launch("gather_rows_kernel");
}

}  // namespace

void build_permutation(cudaStream_t stream, std::int64_t tokens, int topk, int experts, const std::int32_t* topk_ids,
                       std::int32_t* row_slot, std::int32_t* slot_row, std::int64_t* tokens_per_expert) {
  const std::int64_t slots = tokens * topk;
  if (slots > 0x7fffffff) throw std::invalid_argument("build_permutation: tokens·k must fit in int32 row indices");
  if (experts <= 0) return;
  count_experts_kernel<<<experts, block_threads, 0, stream>>>(slots, topk_ids, tokens_per_expert);
  check_launch("count_experts_kernel");
  place_slots_kernel<<<experts, block_threads, 0, stream>>>(slots, topk_ids, tokens_per_expert, row_slot, slot_row);
  check_launch("place_slots_kernel");
}

// The widest vector that divides the row and both base addresses: 16-byte copies for any bf16 row of a multiple
// of 8 elements.
void gather_rows(cudaStream_t stream, const void* x, std::size_t row_bytes, const std::int32_t* index,
                 std::int64_t rows, int divisor, void* out) {
  check_grid(rows, "gather_rows");
  if (rows == 0 || row_bytes == 0) return;
  const auto alignment = row_bytes | reinterpret_cast<std::uintptr_t>(x) | reinterpret_cast<std::uintptr_t>(out);
  if (alignment % 16 == 0) launch_gather<uint4>(stream, x, row_bytes, index, rows, divisor, out);
  else if (alignment % 8 == 0) launch_gather<uint2>(stream, x, row_bytes, index, rows, divisor, out);
  else if (alignment % 4 == 0) launch_gather<unsigned>(stream, x, row_bytes, index, rows, divisor, out);
  else if (alignment % 2 == 0) launch_gather<unsigned short>(stream, x, row_bytes, index, rows, divisor, out);
  else launch_gather<unsigned char>(stream, x, row_bytes, index, rows, divisor, out);
}

template <typename T>
void unpermute(cudaStream_t stream, const T* y, std::int64_t width, std::int64_t tokens, int topk,
               const std::int32_t* slot_row, const Acc<T>* topk_probs, T* out) {
  if (topk < 1 || topk > max_topk) throw std::invalid_argument("unpermute: k must be in [1, 32]");
  check_grid(tokens, "unpermute");
  if (tokens == 0) return;
  using D = Dev<T>;
  constexpr int V = 16 / sizeof(D);
  const auto alignment = std::uintptr_t(width) * sizeof(D) | reinterpret_cast<std::uintptr_t>(y) |
                         reinterpret_cast<std::uintptr_t>(out);
  const auto* yd = reinterpret_cast<const D*>(y);
  auto* od = reinterpret_cast<D*>(out);
  if (alignment % 16 == 0) {
    const std::int64_t packs = width / V;
    const int threads = packs >= block_threads ? block_threads : int((packs + 31) / 32 * 32);
    unpermute_kernel<D, Acc<T>, V><<<unsigned(tokens), threads, 0, stream>>>(yd, packs, topk, slot_row, topk_probs,
                                                                             od);
  } else {
    unpermute_kernel<D, Acc<T>, 1><<<unsigned(tokens), block_threads, 0, stream>>>(yd, width, topk, slot_row,
                                                                                 topk_probs, od);
  }
  check_launch("unpermute_kernel");
}

template <typename T>
void unpermute_backward(cudaStream_t stream, const T* dout, const T* y, std::int64_t width, std::int64_t tokens,
                        int topk, const std::int32_t* slot_row, const Acc<T>* topk_probs, T* dy, Acc<T>* dprobs) {
  check_grid(tokens * topk, "unpermute_backward");
  if (tokens == 0) return;
  unpermute_backward_kernel<Dev<T>, Acc<T>><<<unsigned(tokens * topk), block_threads, 0, stream>>>(
      reinterpret_cast<const Dev<T>*>(dout), reinterpret_cast<const Dev<T>*>(y), width, topk, slot_row, topk_probs,
      reinterpret_cast<Dev<T>*>(dy), dprobs);
  check_launch("unpermute_backward_kernel");
}

template <typename T>
void scatter_add_rows(cudaStream_t stream, const T* y, std::int64_t width, const std::int32_t* offsets,
                      const std::int32_t* sources, const Acc<T>* weights, std::int64_t out_rows, T* out) {
  check_grid(out_rows, "scatter_add_rows");
  if (out_rows == 0) return;
  scatter_add_rows_kernel<Dev<T>, Acc<T>><<<unsigned(out_rows), block_threads, 0, stream>>>(
      reinterpret_cast<const Dev<T>*>(y), width, offsets, sources, weights, reinterpret_cast<Dev<T>*>(out));
  check_launch("scatter_add_rows_kernel");
}

template <typename From, typename To>
void convert(cudaStream_t stream, const From* in, To* out, std::int64_t count) {
  if (count == 0) return;
  convert_kernel<Dev<From>, Dev<To>><<<unsigned((count + block_threads - 1) / block_threads), block_threads, 0,
                                       stream>>>(reinterpret_cast<const Dev<From>*>(in),
                                                 reinterpret_cast<Dev<To>*>(out), count);
  check_launch("convert_kernel");
}

#define MOE_INSTANTIATE_TOKEN_KERNELS(T)                                                                          \
  template void unpermute<T>(cudaStream_t, const T*, std::int64_t, std::int64_t, int, const std::int32_t*,        \
                             const Acc<T>*, T*);                                                                  \
  template void unpermute_backward<T>(cudaStream_t, const T*, const T*, std::int64_t, std::int64_t, int,          \
                                      const std::int32_t*, const Acc<T>*, T*, Acc<T>*);                           \
  template void scatter_add_rows<T>(cudaStream_t, const T*, std::int64_t, const std::int32_t*,                    \
                                    const std::int32_t*, const Acc<T>*, std::int64_t, T*);
MOE_INSTANTIATE_TOKEN_KERNELS(double)
MOE_INSTANTIATE_TOKEN_KERNELS(float)
MOE_INSTANTIATE_TOKEN_KERNELS(bf16)
template void convert<float, bf16>(cudaStream_t, const float*, bf16*, std::int64_t);
template void convert<bf16, float>(cudaStream_t, const bf16*, float*, std::int64_t);
template void convert<double, float>(cudaStream_t, const double*, float*, std::int64_t);

}  // namespace moe::cuda
