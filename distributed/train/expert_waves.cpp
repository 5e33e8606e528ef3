#include "distributed/train/expert_waves.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace moe::dist {

std::vector<WaveStep> wave_schedule(int waves) {
  std::vector<WaveStep> s{{WaveOp::dispatch, 0}};
  for (int w = 0; w < waves; ++w) {
    s.push_back({WaveOp::launch, w});
    if (w + 1 < waves) s.push_back({WaveOp::dispatch, w + 1});
    if (w > 0) s.push_back({WaveOp::combine, w - 1});
    s.push_back({WaveOp::wait, w});
  }
  s.push_back({WaveOp::combine, waves - 1});
  return s;
}

int wave_of_local_expert(int i, int local_experts, int waves) {
  int w = 0;  // the last wave starting at or before i: wave w starts at ⌊w·L/W⌋
  while (w + 1 < waves && std::int64_t(w + 1) * local_experts / waves <= i) ++w;
  return w;
}

// The worker: one thread that runs the computes handed to it, in order, for the life of the layer use (a thread per
// wave cost ~200 µs to start, longer than a test-size wave's dispatch, so the waves did not overlap).
class WaveWorker {
 public:
  WaveWorker() : thread_([this] { loop(); }) {}
  ~WaveWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_one();
    thread_.join();
  }
  WaveWorker(const WaveWorker&) = delete;
  WaveWorker& operator=(const WaveWorker&) = delete;

  std::future<void> submit(std::function<void()> work) {
    std::packaged_task<void()> task(std::move(work));
    std::future<void> done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
    return done;
  }

 private:
  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopped, and every task handed over has run
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();  // an exception lands in the task's future
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

namespace {

// Runs the program: dispatch and combine on this thread, each compute on the worker (one at a time, in wave order:
// a launch follows the wait of the wave before). The spans go to `timeline`; each compute's span is written by the
// worker into its own slot and read after the wait. Leaving early (a dispatch threw), it still waits for every
// launched compute, which uses this frame's closures.
template <typename Dispatch, typename Compute, typename Combine>
void run_schedule(WaveWorker& worker, int waves, Dispatch&& dispatch, Compute&& compute, Combine&& combine,
                  WaveTimeline& timeline) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - start).count(); };
  timeline.clear();
  std::vector<WaveSpan> computed(static_cast<size_t>(waves));
  struct Launched {
    std::vector<std::future<void>> futures;
    ~Launched() {
      for (auto& f : futures)
        if (f.valid()) f.wait();
    }
  } running{std::vector<std::future<void>>(static_cast<size_t>(waves))};
  for (const WaveStep& step : wave_schedule(waves)) {
    const auto w = static_cast<size_t>(step.wave);
    const auto begin = Clock::now();
    switch (step.op) {
      case WaveOp::dispatch: dispatch(step.wave); break;
      case WaveOp::combine: combine(step.wave); break;
      case WaveOp::launch:
        running.futures[w] = worker.submit([&, w, wave = step.wave] {
          const auto b = Clock::now();
          compute(wave);
          computed[w] = {wave, WaveStage::compute, us(b), us(Clock::now()), true};
        });
        continue;
      case WaveOp::wait:
        running.futures[w].get();  // rethrows what the compute threw
        timeline.push_back(computed[w]);
        continue;
    }
    timeline.push_back({step.wave, step.op == WaveOp::dispatch ? WaveStage::dispatch : WaveStage::combine, us(begin),
                        us(Clock::now()), false});
  }
}

}  // namespace

template <typename T>
ExpertWaves<T>::ExpertWaves(int waves, const DispatchGroups& groups, int num_experts, const KernelBackend& kernels,
                            const kernels::SwigluOptions& options)
    : groups_(groups),
      num_experts_(num_experts),
      local_experts_(groups.experts_here(num_experts).count),
      kernels_(kernels),
      options_(options) {
  if (waves < 2 || waves > local_experts_)
    throw std::invalid_argument("expert waves: " + std::to_string(waves) + " waves over " +
                                std::to_string(local_experts_) + " local experts per rank (need 2 ≤ waves ≤ " +
                                "E/ep: every wave has an expert on every rank)");
  waves_.resize(static_cast<size_t>(waves));
}

template <typename T>
Matrix<T> ExpertWaves<T>::forward(const Matrix<T>& u, const Matrix<T>& probs, const BoolMatrix& map,
                                  const kernels::ExpertShards<T>& experts) {
  const int W = waves();
  tokens_ = u.rows();
  std::vector<int> wave_of(static_cast<size_t>(num_experts_));
  for (int e = 0; e < num_experts_; ++e)
    wave_of[static_cast<size_t>(e)] = wave_of_local_expert(e % local_experts_, local_experts_, W);

  const auto dispatch = [&](int w) {
    Wave& wave = waves_[static_cast<size_t>(w)];
    BoolMatrix wave_map = map;
    for (int e = 0; e < num_experts_; ++e)
      if (wave_of[static_cast<size_t>(e)] != w) wave_map.col(e).setConstant(false);
    wave.dispatcher = std::make_unique<AlltoAllDispatcher<T>>(groups_, num_experts_, kernels_);
    wave.rows = wave.dispatcher->dispatch(u, probs, wave_map);
    wave.out = Matrix<T>::Zero(wave.rows.x.rows(), u.cols());  // what the compute overwrites
  };
  const auto compute = [&](int w) {
    Wave& wave = waves_[static_cast<size_t>(w)];
    auto f = kernels_.grouped_swiglu_forward(wave.rows.x, wave.rows.group_sizes, experts, wave.rows.probs, options_);
    wave.pre = std::move(f.pre);
    wave.out = std::move(f.y);
  };
  const auto combine = [&](int w) {
    Wave& wave = waves_[static_cast<size_t>(w)];
    wave.back = wave.dispatcher->return_rows(wave.out);
  };
  worker_ = std::make_unique<WaveWorker>();
  run_schedule(*worker_, W, dispatch, compute, combine, forward_timeline_);

  // The unwaved permuted order, expert-major: expert e's rows are a block of its wave's order (tokens rising).
  order_.clear();
  order_tokens_.clear();
  order_experts_.clear();
  std::vector<size_t> next(static_cast<size_t>(W), 0);
  for (int e = 0; e < num_experts_; ++e) {
    const int w = wave_of[static_cast<size_t>(e)];
    const AlltoAllDispatcher<T>& d = *waves_[static_cast<size_t>(w)].dispatcher;
    size_t& j = next[static_cast<size_t>(w)];
    for (; j < d.permuted_experts().size() && d.permuted_experts()[j] == e; ++j) {
      order_.emplace_back(w, Eigen::Index(j));
      order_tokens_.push_back(d.permuted_rows()[j]);
      order_experts_.push_back(e);
    }
  }
  return kernels_.scatter_add_rows(merged(&Wave::back), order_tokens_, tokens_);
}

template <typename T>
void ExpertWaves<T>::backward(const Matrix<T>& grad_out, const kernels::ExpertShards<T>& experts,
                              kernels::ExpertShards<T>& grads, Matrix<T>& grad_u, Matrix<T>& grad_probs) {
  if (!worker_) throw std::logic_error("expert waves: backward without its forward (one use: forward, then backward)");
  const auto dispatch = [&](int w) {
    Wave& wave = waves_[static_cast<size_t>(w)];
    wave.grad_rows = wave.dispatcher->combine_backward(grad_out);
    wave.grad = {Matrix<T>::Zero(wave.grad_rows.rows(), grad_out.cols()), Vector<T>::Zero(wave.grad_rows.rows())};
  };
  // One compute at a time, so the waves' wgrad (each into its own experts) never race.
  const auto compute = [&](int w) {
    Wave& wave = waves_[static_cast<size_t>(w)];
    wave.grad = kernels_.grouped_swiglu_backward(wave.rows.x, wave.rows.group_sizes, experts, wave.rows.probs,
                                                 options_, wave.pre, wave.grad_rows, grads);
  };
  const auto combine = [&](int w) {
    Wave& wave = waves_[static_cast<size_t>(w)];
    wave.dispatcher->return_grad_rows(wave.grad.dx, wave.grad.dprob, wave.back_grad, wave.back_grad_probs);
  };
  run_schedule(*worker_, waves(), dispatch, compute, combine, backward_timeline_);
  worker_.reset();  // the use is over: its thread ends
  unpermute_grads(kernels_, merged(&Wave::back_grad), merged(&Wave::back_grad_probs), order_tokens_, order_experts_,
                  tokens_, num_experts_, grad_u, grad_probs);
}

template <typename T>
Matrix<T> ExpertWaves<T>::merged(Matrix<T> Wave::*rows) const {
  const Eigen::Index cols = (waves_.front().*rows).cols();
  Matrix<T> m(Eigen::Index(order_.size()), cols);
  for (size_t j = 0; j < order_.size(); ++j)
    m.row(Eigen::Index(j)) = (waves_[static_cast<size_t>(order_[j].first)].*rows).row(order_[j].second);
  return m;
}

template <typename T>
ExpertWaves<T>::~ExpertWaves() = default;

template class ExpertWaves<double>;
template class ExpertWaves<float>;

}  // namespace moe::dist
