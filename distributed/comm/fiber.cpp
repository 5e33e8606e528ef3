#include "distributed/comm/fiber.hpp"

#include <cxxabi.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#define MOE_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOE_FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define MOE_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MOE_FIBER_TSAN 1
#endif
#endif
#ifdef MOE_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef MOE_FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace moe::inproc {
namespace {

// A thread's default stack (ulimit -s): the rank code was written for threads. Only the pages a rank touches
// take memory; the lowest page is a guard, so an overflow faults instead of writing into a neighbour.
constexpr std::size_t kStackBytes = std::size_t(8) << 20;

std::size_t page_bytes() {
  static const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
  return page;
}

// Stacks are kept for the next world: check runs hundreds of worlds, and a fresh mapping would fault its pages
// in again each time.
class StackPool {
 public:
  std::byte* acquire() {  // the lowest usable address; kStackBytes above it are the stack
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        std::byte* stack = free_.back();
        free_.pop_back();
        return stack;
      }
    }
    void* mapping = ::mmap(nullptr, page_bytes() + kStackBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mapping == MAP_FAILED) throw std::bad_alloc();
    ::mprotect(mapping, page_bytes(), PROT_NONE);
    return static_cast<std::byte*>(mapping) + page_bytes();
  }
  void release(std::byte* stack) {
    {
      std::lock_guard lock(mutex_);
      if (free_.size() < kKept) {
        free_.push_back(stack);
        return;
      }
    }
    ::munmap(stack - page_bytes(), page_bytes() + kStackBytes);
  }

 private:
  static constexpr std::size_t kKept = 64;
  std::mutex mutex_;
  std::vector<std::byte*> free_;
};

StackPool& stack_pool() {
  static StackPool pool;  // never destroyed before a scheduler: function-local statics outlive their users' calls
  return pool;
}

// libstdc++'s per-thread exception state (__cxa_eh_globals in libsupc++'s unwind-cxx.h): the innermost exception
// being handled (a chain through the exceptions) and the number thrown but not yet caught.
struct ExceptionState {
  void* caught = nullptr;
  unsigned int uncaught = 0;
};

void swap_exception_state([[maybe_unused]] ExceptionState& saved) {
#if defined(__GLIBCXX__)
  auto* globals = reinterpret_cast<ExceptionState*>(abi::__cxa_get_globals());
  std::swap(*globals, saved);
#endif
}

}  // namespace

struct FiberScheduler::Fiber {
  ucontext_t context{};
  std::byte* stack = nullptr;
  bool started = false;
  bool finished = false;
  ExceptionState exceptions;  // this fiber's while it is suspended, the thread's while it runs
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;
};

struct FiberScheduler::Thread {
  ucontext_t context{};
  void* asan_fake_stack = nullptr;
  const void* asan_bottom = nullptr;
  std::size_t asan_size = 0;
  void* tsan_fiber = nullptr;
};

FiberScheduler::FiberScheduler(int count) : thread_(std::make_unique<Thread>()) {
  fibers_.reserve(std::size_t(count));
  for (int i = 0; i < count; ++i) fibers_.push_back(std::make_unique<Fiber>());
}

FiberScheduler::~FiberScheduler() {
  for (auto& f : fibers_) {
    if (f->stack) stack_pool().release(f->stack);
#ifdef MOE_FIBER_TSAN
    if (f->tsan_fiber) __tsan_destroy_fiber(f->tsan_fiber);
#endif
  }
}

// makecontext passes ints: the scheduler's address arrives in two halves.
void FiberScheduler::entry(unsigned high, unsigned low) {
  auto* self = reinterpret_cast<FiberScheduler*>((std::uintptr_t(high) << 32) | std::uintptr_t(low));
  Fiber& f = *self->fibers_[std::size_t(self->current_)];
#ifdef MOE_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &self->thread_->asan_bottom, &self->thread_->asan_size);
#endif
  (*self->body_)(self->current_);
  f.finished = true;
#ifdef MOE_FIBER_ASAN
  __sanitizer_start_switch_fiber(nullptr, self->thread_->asan_bottom, self->thread_->asan_size);  // no return
#endif
#ifdef MOE_FIBER_TSAN
  __tsan_switch_to_fiber(self->thread_->tsan_fiber, 0);
#endif
  ::setcontext(&self->thread_->context);
}

void FiberScheduler::yield() {
  Fiber& f = *fibers_[std::size_t(current_)];
#ifdef MOE_FIBER_ASAN
  __sanitizer_start_switch_fiber(&f.asan_fake_stack, thread_->asan_bottom, thread_->asan_size);
#endif
#ifdef MOE_FIBER_TSAN
  __tsan_switch_to_fiber(thread_->tsan_fiber, 0);
#endif
  ::swapcontext(&f.context, &thread_->context);
#ifdef MOE_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &thread_->asan_bottom, &thread_->asan_size);
#endif
}

void FiberScheduler::resume(int i) {
  Fiber& f = *fibers_[std::size_t(i)];
  current_ = i;
  if (!f.started) {
    f.stack = stack_pool().acquire();
    ::getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;  // entry() never returns: it switches back itself
    const auto address = reinterpret_cast<std::uintptr_t>(this);
    ::makecontext(&f.context, reinterpret_cast<void (*)()>(&FiberScheduler::entry), 2, unsigned(address >> 32),
                  unsigned(address & 0xffffffffu));
    f.started = true;
#ifdef MOE_FIBER_TSAN
    f.tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  swap_exception_state(f.exceptions);
#ifdef MOE_FIBER_ASAN
  __sanitizer_start_switch_fiber(&thread_->asan_fake_stack, f.stack, kStackBytes);
#endif
#ifdef MOE_FIBER_TSAN
  __tsan_switch_to_fiber(f.tsan_fiber, 0);
#endif
  ::swapcontext(&thread_->context, &f.context);
#ifdef MOE_FIBER_ASAN
  __sanitizer_finish_switch_fiber(thread_->asan_fake_stack, nullptr, nullptr);
#endif
  swap_exception_state(f.exceptions);
  current_ = -1;
  if (f.finished) {
    stack_pool().release(std::exchange(f.stack, nullptr));
#ifdef MOE_FIBER_TSAN
    __tsan_destroy_fiber(std::exchange(f.tsan_fiber, nullptr));
#endif
  }
}

void FiberScheduler::run(const std::function<void(int)>& body, const std::function<bool(int)>& runnable) {
  body_ = &body;
#ifdef MOE_FIBER_TSAN
  thread_->tsan_fiber = __tsan_get_current_fiber();
#endif
  const int n = int(fibers_.size());
  int live = n;
  int cursor = 0;
  while (live > 0) {
    int chosen = -1;
    for (int k = 0; k < n && chosen < 0; ++k) {
      const int i = (cursor + k) % n;
      const Fiber& f = *fibers_[std::size_t(i)];
      if (!f.finished && (!f.started || runnable(i))) chosen = i;
    }
    if (chosen < 0)
      throw std::logic_error("in-process fibers: " + std::to_string(live) +
                             " ranks wait and none can continue, yet the world was not aborted");
    cursor = (chosen + 1) % n;
    resume(chosen);
    if (fibers_[std::size_t(chosen)]->finished) --live;
  }
  body_ = nullptr;
}

}  // namespace moe::inproc
