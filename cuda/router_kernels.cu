// Kernels of router_kernels.hpp: one warp per token. Lane l owns experts l, l + 32, …; a selection is a warp-wide
// arg-max with the order (value descending, index ascending), so every lane agrees and ties go to the lower index.
// Lanes remember what they have already handed out in a bit mask (bit q = expert l + 32·q), hence E <= 1024.
#include "cuda/cuda_error.hpp"
#include "cuda/device_math.cuh"
#include "cuda/router_kernels.hpp"

#include <climits>
#include <stdexcept>
#include <string>

namespace moe::cuda {
namespace {

constexpr int warps_per_block = 4;
constexpr int max_topk = 16;

template <typename T>
__device__ bool better(T v, int i, T best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

// After this every lane holds the warp's best (v, i).
template <typename T>
__device__ void warp_best(T& v, int& i) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const T ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, i, offset);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

template <typename T>
__device__ T warp_max(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <typename T>
__device__ T ranking(const RouterSpec& spec, const T* logits, const T* scores, const T* bias, int e) {
  T r = spec.score == RouterSpec::Score::softmax && !spec.pre_softmax ? logits[e] : scores[e];
  if (spec.use_bias) r += bias[e];
  return r;
}

template <typename T>
__device__ void write_scores(const RouterSpec& spec, const T* logits, T* scores, int lane) {
  const int E = spec.experts;
  if (spec.score == RouterSpec::Score::softmax) {
    T m = -INFINITY;
    for (int e = lane; e < E; e += 32) m = fmax(m, logits[e]);
    m = warp_max(m);
    T sum = 0;
    for (int e = lane; e < E; e += 32) sum += exp_acc(logits[e] - m);
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) scores[e] = exp_acc(logits[e] - m) / sum;
  } else if (spec.score == RouterSpec::Score::sigmoid) {
    for (int e = lane; e < E; e += 32) scores[e] = T(1) / (T(1) + exp_acc(-logits[e]));
  } else {
    // sqrt(softplus), softplus as torch: x above 20, log1p(exp(x)) below.
    for (int e = lane; e < E; e += 32) {
      const T l = logits[e];
      scores[e] = sqrt_acc(l > T(20) ? l : log1p_acc(exp_acc(l)));
    }
  }
  __syncwarp();
}

// Group-limited routing: a bit mask of the group_topk groups with the largest sums of their top (k/group_topk)
// rankings. Lane g holds group g's score.
template <typename T>
__device__ unsigned allowed_groups(const RouterSpec& spec, const T* logits, const T* scores, const T* bias,
                                   int lane) {
  if (spec.num_groups == 0) return 0xffffffffu;
  const int per = spec.experts / spec.num_groups, picks = spec.topk / spec.group_topk;
  T mine = -INFINITY;
  for (int g = 0; g < spec.num_groups; ++g) {
    unsigned taken = 0;
    T sum = 0;
    for (int p = 0; p < picks; ++p) {
      T v = -INFINITY;
      int i = INT_MAX;
      for (int q = 0; lane + 32 * q < per; ++q) {
        const int e = g * per + lane + 32 * q;
        const T r = ranking(spec, logits, scores, bias, e);
        if (!((taken >> q) & 1u) && better(r, e, v, i)) {
          v = r;
          i = e;
        }
      }
      warp_best(v, i);
      const int local = i - g * per;
      if (local % 32 == lane) taken |= 1u << (local / 32);
      sum += v;
    }
    if (lane == g) mine = sum;
  }
  unsigned allowed = 0;
  for (int p = 0; p < spec.group_topk; ++p) {
    const bool candidate = lane < spec.num_groups && !((allowed >> lane) & 1u);
    T v = candidate ? mine : T(-INFINITY);
    int i = candidate ? lane : INT_MAX;
    warp_best(v, i);
    allowed |= 1u << i;
  }
  return allowed;
}

template <typename T>
__global__ void route_topk_kernel(RouterSpec spec, std::int64_t tokens, const T* logits_all, const T* bias,
                                  const std::int64_t* token_ids, const std::int64_t* tid2eid, T* scores_all,
                                  std::int32_t* topk_ids, T* topk_probs) {
  const std::int64_t t = std::int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const int E = spec.experts, k = spec.topk;
  const T* logits = logits_all + t * E;
  T* scores = scores_all + t * E;
  write_scores(spec, logits, scores, lane);

  int chosen[max_topk];
  if (spec.hash) {
    for (int j = 0; j < k; ++j) chosen[j] = int(tid2eid[token_ids[t] * k + j]);
  } else {
    const unsigned groups = allowed_groups(spec, logits, scores, bias, lane);
    const int per = spec.num_groups > 0 ? E / spec.num_groups : E;
    unsigned taken = 0;
    for (int j = 0; j < k; ++j) {
      T v = -INFINITY;
      int i = INT_MAX;
      for (int q = 0; lane + 32 * q < E; ++q) {
        const int e = lane + 32 * q;
        if ((taken >> q) & 1u || !((groups >> (e / per)) & 1u)) continue;
        const T r = ranking(spec, logits, scores, bias, e);
        if (better(r, e, v, i)) {
          v = r;
          i = e;
        }
      }
      warp_best(v, i);
      if (i % 32 == lane) taken |= 1u << (i / 32);
      chosen[j] = i;
    }
  }
  if (lane != 0) return;
  T w[max_topk];
  if (spec.score == RouterSpec::Score::softmax && !spec.pre_softmax && !spec.hash) {
    T m = -INFINITY, sum = 0;
    for (int j = 0; j < k; ++j) m = fmax(m, logits[chosen[j]]);
    for (int j = 0; j < k; ++j) sum += w[j] = exp_acc(logits[chosen[j]] - m);
    for (int j = 0; j < k; ++j) w[j] /= sum;
  } else {
    T sum = 0;
    for (int j = 0; j < k; ++j) sum += w[j] = scores[chosen[j]];
    if (spec.score != RouterSpec::Score::softmax && spec.renormalise)
      for (int j = 0; j < k; ++j) w[j] /= sum + T(spec.renormalise_epsilon);
  }
  for (int j = 0; j < k; ++j) {
    topk_ids[t * k + j] = chosen[j];
    topk_probs[t * k + j] = T(spec.scaling) * w[j];
  }
}

template <typename T>
__global__ void route_backward_kernel(RouterSpec spec, std::int64_t tokens, const T* logits_all,
                                      const T* scores_all, const std::int32_t* topk_ids, const T* grad_topk,
                                      T* grad_logits_all) {
  const std::int64_t t = std::int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const int E = spec.experts, k = spec.topk;
  const T* logits = logits_all + t * E;
  const T* scores = scores_all + t * E;
  T* grad_logits = grad_logits_all + t * E;
  int chosen[max_topk];
  T dw[max_topk];
  for (int j = 0; j < k; ++j) {
    chosen[j] = topk_ids[t * k + j];
    dw[j] = T(spec.scaling) * grad_topk[t * k + j];
  }
  if (spec.score == RouterSpec::Score::softmax && !spec.pre_softmax && !spec.hash) {
    // Softmax over the selected logits: dl = q ⊙ (dw − ⟨q, dw⟩).
    T q[max_topk];
    T m = -INFINITY, sum = 0, qdw = 0;
    for (int j = 0; j < k; ++j) m = fmax(m, logits[chosen[j]]);
    for (int j = 0; j < k; ++j) sum += q[j] = exp_acc(logits[chosen[j]] - m);
    for (int j = 0; j < k; ++j) qdw += (q[j] /= sum) * dw[j];
    for (int e = lane; e < E; e += 32) {
      T g = 0;
      for (int j = 0; j < k; ++j)
        if (chosen[j] == e) g = q[j] * (dw[j] - qdw);
      grad_logits[e] = g;
    }
    return;
  }
  if (spec.score != RouterSpec::Score::softmax && spec.renormalise) {
    T denom = T(spec.renormalise_epsilon), dot = 0;
    for (int j = 0; j < k; ++j) denom += scores[chosen[j]];
    for (int j = 0; j < k; ++j) dot += dw[j] * scores[chosen[j]];
    for (int j = 0; j < k; ++j) dw[j] = dw[j] / denom - dot / (denom * denom);
  }
  T s_dot_g = 0;  // Σ_e s_e·g_e for the softmax backward; g is zero off the selection
  for (int j = 0; j < k; ++j) s_dot_g += scores[chosen[j]] * dw[j];
  for (int e = lane; e < E; e += 32) {
    T g = 0;
    for (int j = 0; j < k; ++j)
      if (chosen[j] == e) g += dw[j];  // a hash table may name an expert twice: its weights add
    const T s = scores[e];
    if (spec.score == RouterSpec::Score::softmax) {
      grad_logits[e] = s * (g - s_dot_g);
    } else if (spec.score == RouterSpec::Score::sigmoid) {
      grad_logits[e] = g * s * (T(1) - s);
    } else {
      const T l = logits[e];
      const T dsoftplus = l > T(20) ? T(1) : T(1) / (T(1) + exp_acc(-l));
      grad_logits[e] = g * dsoftplus / (T(2) * s);
    }
  }
}

unsigned blocks_for(std::int64_t tokens) { return unsigned((tokens + warps_per_block - 1) / warps_per_block); }

}  // namespace

void check_router_spec(const RouterSpec& spec) {
  auto fail = [](const std::string& rule) { throw std::invalid_argument("CUDA router: " + rule); };
  if (spec.experts < 1 || spec.experts > 1024) fail("num_experts must be in [1, 1024] (one warp per token)");
  if (spec.topk < 1 || spec.topk > max_topk || spec.topk > spec.experts) fail("topk must be in [1, min(16, E)]");
  if (spec.num_groups < 0 || spec.num_groups > 32) fail("num_groups must be in [0, 32]");
  if (spec.num_groups > 0 && (spec.experts % spec.num_groups != 0 || spec.group_topk < 1 ||
                              spec.group_topk > spec.num_groups || spec.topk % spec.group_topk != 0))
    fail("num_groups must divide E and group_topk must divide k");
}

template <typename T>
void route_topk(cudaStream_t stream, const RouterSpec& spec, std::int64_t tokens, const T* logits, const T* bias,
                const std::int64_t* token_ids, const std::int64_t* tid2eid, T* scores, std::int32_t* topk_ids,
                T* topk_probs) {
  check_router_spec(spec);
  if ((spec.use_bias && bias == nullptr) || (spec.hash && (token_ids == nullptr || tid2eid == nullptr)))
    throw std::invalid_argument("CUDA router: expert bias needs a bias vector, hash routing token ids and tid2eid");
  if (tokens == 0) return;
  route_topk_kernel<T><<<blocks_for(tokens), 32 * warps_per_block, 0, stream>>>(
      spec, tokens, logits, bias, token_ids, tid2eid, scores, topk_ids, topk_probs);
  check_launch("route_topk_kernel");
}

template <typename T>
void route_backward(cudaStream_t stream, const RouterSpec& spec, std::int64_t tokens, const T* logits,
                    const T* scores, const std::int32_t* topk_ids, const T* grad_topk_probs, T* grad_logits) {
  check_router_spec(spec);
  if (tokens == 0) return;
  route_backward_kernel<T><<<blocks_for(tokens), 32 * warps_per_block, 0, stream>>>(
      spec, tokens, logits, scores, topk_ids, grad_topk_probs, grad_logits);
  check_launch("route_backward_kernel");
}

#define MOE_INSTANTIATE_ROUTER(T)                                                                                 \
  template void route_topk<T>(cudaStream_t, const RouterSpec&, std::int64_t, const T*, const T*,                 \
                              const std::int64_t*, const std::int64_t*, T*, std::int32_t*, T*);                   \
  template void route_backward<T>(cudaStream_t, const RouterSpec&, std::int64_t, const T*, const T*,             \
                                  const std::int32_t*, const T*, T*);
MOE_INSTANTIATE_ROUTER(double)
MOE_INSTANTIATE_ROUTER(float)

}  // namespace moe::cuda
