// Fibers for in-process ranks (internal to the in-process backend): every rank of a world runs as a coroutine with
// its own stack on the thread that called InprocWorld::run, and a rank gives the thread back only where it would
// otherwise block (WorldState::wait). Handing the CPU from one rank to another is then a user-space stack switch
// instead of a futex wake, a kernel reschedule and a futex wait: with eight rank threads on two cores those were a
// quarter of `moe-oracle check`'s time (perf: try_to_wake_up 12%, finish_task_switch 11%).
//
// Shape: run() is a round-robin loop on the calling thread. It resumes fiber i when i has not started, or when
// runnable(i) says the condition i waits for now holds; fiber i runs until it calls yield() or returns. The order
// is fixed, so a world of fibers interleaves its ranks the same way on every run.
//
// What a stack switch must carry besides the registers:
//   - the C++ runtime's per-thread exception state (the chain of exceptions being handled and the count of those
//     in flight): a rank that waits inside a catch block must find its own chain when it resumes, so each fiber
//     keeps its own and run() swaps it in and out;
//   - AddressSanitizer and ThreadSanitizer are told of every switch (their fiber interfaces), so that stack
//     poisoning and happens-before follow the fiber rather than the thread.
#pragma once

#include <functional>
#include <memory>
#include <vector>

namespace moe::inproc {

class FiberScheduler {
 public:
  explicit FiberScheduler(int count);
  ~FiberScheduler();
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;

  // Runs body(i) on fiber i for every i and returns when every body has returned. body must not throw (a rank
  // catches its own exceptions). runnable(i) is asked only about a fiber that yielded; it must become true for
  // some fiber whenever any has not returned (WorldState guarantees it by aborting a deadlocked world), else run()
  // throws std::logic_error.
  void run(const std::function<void(int)>& body, const std::function<bool(int)>& runnable);

  // Called by the running fiber: hand the thread back to run(), which resumes this fiber once runnable(i) holds.
  void yield();

 private:
  struct Fiber;
  struct Thread;  // the thread's own context, to which every fiber returns
  static void entry(void* scheduler) noexcept;
  void resume(int i);

  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::unique_ptr<Thread> thread_;
  const std::function<void(int)>* body_ = nullptr;
  int current_ = -1;
};

}  // namespace moe::inproc
