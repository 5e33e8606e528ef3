#include "distributed/comm/fiber.hpp"

#include <cxxabi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
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
// On x86-64 (System V) a stack switch is a few instructions of our own; elsewhere it is ucontext's swapcontext,
// which also saves and restores the signal mask: a system call on every switch (416,000 of them per default
// `check`, half of all its system calls).
#if defined(__x86_64__) && defined(__linux__)
#define MOE_FIBER_OWN_SWITCH 1
#else
#include <ucontext.h>
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

// A suspended execution context and the two things done with one: prepare it to run fn(arg) on a fresh stack, and
// switch to it from the running one (saved into `from`).
#ifdef MOE_FIBER_OWN_SWITCH
// The saved context is the stack pointer of the suspended side. Below it lie what the System V ABI has a callee
// keep: MXCSR and the x87 control word (one 8-byte slot), r15, r14, r13, r12, rbx, rbp, then the return address.
// moe_fiber_switch pushes those, stores the stack pointer in *from, loads `to`'s and pops them back in reverse;
// its `ret` resumes the other side where it called the switch. A fresh stack is laid out as if it had called the
// switch from moe_fiber_start, with fn in r13 and arg in r12: the first switch to it "returns" into that
// trampoline, which calls fn(arg) on a 16-byte aligned stack. fn never returns (it switches away for good).
extern "C" {
void moe_fiber_switch(void** from, void* to);
void moe_fiber_start();
}
asm(R"(
  .text
  .globl moe_fiber_switch
  .hidden moe_fiber_switch
  .type moe_fiber_switch, @function
  .p2align 4
moe_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size moe_fiber_switch, .-moe_fiber_switch

  .globl moe_fiber_start
  .hidden moe_fiber_start
  .type moe_fiber_start, @function
  .p2align 4
moe_fiber_start:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size moe_fiber_start, .-moe_fiber_start
)");

struct Context {
  void* stack_pointer = nullptr;
};

void prepare(Context& c, std::byte* stack, std::size_t bytes, void (*fn)(void*), void* arg) {
  // Ten slots under the (page-aligned) top: the eight the switch pops, then two zeros above the return address so
  // that moe_fiber_start runs with the stack pointer a multiple of 16 below the top.
  auto** slot = reinterpret_cast<void**>(stack + bytes) - 10;
  std::uint32_t control[2] = {0, 0};
  asm volatile("stmxcsr %0; fnstcw %1" : "=m"(control[0]), "=m"(control[1]));  // the creating thread's modes
  std::memcpy(&slot[0], control, sizeof(void*));
  slot[1] = nullptr;                                       // r15
  slot[2] = nullptr;                                       // r14
  slot[3] = reinterpret_cast<void*>(fn);                   // r13
  slot[4] = arg;                                           // r12
  slot[5] = nullptr;                                       // rbx
  slot[6] = nullptr;                                       // rbp
  slot[7] = reinterpret_cast<void*>(&moe_fiber_start);     // return address
  slot[8] = slot[9] = nullptr;
  c.stack_pointer = slot;
}

void switch_context(Context& from, const Context& to) { moe_fiber_switch(&from.stack_pointer, to.stack_pointer); }
#else
struct Context {
  ucontext_t context{};
};

// makecontext passes ints: the argument's address arrives in two halves.
struct StartCall {
  void (*fn)(void*);
  void* arg;
};
void start_from_halves(unsigned high, unsigned low) {
  const auto* call = reinterpret_cast<const StartCall*>((std::uintptr_t(high) << 32) | std::uintptr_t(low));
  call->fn(call->arg);
}

void prepare(Context& c, std::byte* stack, std::size_t bytes, void (*fn)(void*), void* arg) {
  static thread_local StartCall call;  // read by the fiber's first instructions, before the next prepare
  call = {fn, arg};
  ::getcontext(&c.context);
  c.context.uc_stack.ss_sp = stack;
  c.context.uc_stack.ss_size = bytes;
  c.context.uc_link = nullptr;  // fn never returns: it switches away for good
  const auto address = reinterpret_cast<std::uintptr_t>(&call);
  ::makecontext(&c.context, reinterpret_cast<void (*)()>(&start_from_halves), 2, unsigned(address >> 32),
                unsigned(address & 0xffffffffu));
}

void switch_context(Context& from, const Context& to) { ::swapcontext(&from.context, &to.context); }
#endif

}  // namespace

struct FiberScheduler::Fiber {
  Context context;
  std::byte* stack = nullptr;
  bool started = false;
  bool finished = false;
  ExceptionState exceptions;  // this fiber's while it is suspended, the thread's while it runs
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;
};

struct FiberScheduler::Thread {
  Context context;
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

void FiberScheduler::entry(void* scheduler) noexcept {
  auto* self = static_cast<FiberScheduler*>(scheduler);
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
  switch_context(f.context, self->thread_->context);  // never resumed: run() sees f.finished
}

void FiberScheduler::yield() {
  Fiber& f = *fibers_[std::size_t(current_)];
#ifdef MOE_FIBER_ASAN
  __sanitizer_start_switch_fiber(&f.asan_fake_stack, thread_->asan_bottom, thread_->asan_size);
#endif
#ifdef MOE_FIBER_TSAN
  __tsan_switch_to_fiber(thread_->tsan_fiber, 0);
#endif
  switch_context(f.context, thread_->context);
#ifdef MOE_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &thread_->asan_bottom, &thread_->asan_size);
#endif
}

void FiberScheduler::resume(int i) {
  Fiber& f = *fibers_[std::size_t(i)];
  current_ = i;
  if (!f.started) {
    f.stack = stack_pool().acquire();
    prepare(f.context, f.stack, kStackBytes, &FiberScheduler::entry, this);
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
  switch_context(thread_->context, f.context);
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
