#include "distributed/comm/inproc_world.hpp"

#include "distributed/comm/fiber.hpp"
#include "distributed/comm/inproc_communicator.hpp"
#include "distributed/comm/inproc_state.hpp"

#include <cstdlib>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace moe {
namespace {

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

RankExecution default_rank_execution() {
  const char* value = std::getenv("MOE_INPROC_RANKS");
  if (value == nullptr || *value == '\0' || std::string(value) == "fibers") return RankExecution::fibers;
  if (std::string(value) == "threads") return RankExecution::threads;
  throw std::invalid_argument("MOE_INPROC_RANKS=" + std::string(value) + ": expected fibers or threads");
}

InprocWorld::InprocWorld(int size, RankExecution execution) : size_(size), execution_(execution) {
  require_size(size);
}

void InprocWorld::require_size(int size) {
  if (size < 1) {
    throw std::invalid_argument("InprocWorld: size " + std::to_string(size) + " (a world has at least one rank)");
  }
  if (size > kMaxRanks) {
    throw std::invalid_argument("in-process ranks: a world of " + std::to_string(size) +
                                " is more than " + std::to_string(kMaxRanks) + "; run it under mpirun (--backend mpi)");
  }
}

std::unique_ptr<Communicator> single_rank_communicator() {
  auto world = std::make_shared<inproc::WorldState>(1);
  auto root = std::make_shared<inproc::Group>(world, std::vector<int>{0}, "world");
  return std::make_unique<inproc::InprocCommunicator>(root, 0);
}

void InprocWorld::run(const std::function<void(Communicator&)>& fn) const {
  auto world = std::make_shared<inproc::WorldState>(size_);
  std::vector<int> members(static_cast<std::size_t>(size_));
  std::iota(members.begin(), members.end(), 0);
  auto root = std::make_shared<inproc::Group>(world, std::move(members), "world");

  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size_));
  int first_failure = -1;  // the rank whose exception aborted the world; guarded by world->mutex
  auto rank_main = [&](int r) {
    try {
      inproc::InprocCommunicator comm(root, r);
      fn(comm);
    } catch (...) {
      errors[std::size_t(r)] = std::current_exception();
      std::lock_guard lock(world->mutex);
      if (!world->aborted()) {
        first_failure = r;
        world->abort("rank " + std::to_string(r) + " threw: " + describe(errors[std::size_t(r)]));
      }
    }
    std::lock_guard lock(world->mutex);
    world->finish(r);
  };

  if (execution_ == RankExecution::fibers) {
    inproc::FiberScheduler scheduler(size_);
    world->run_as_fibers(&scheduler);
    scheduler.run(rank_main, [&](int r) {
      std::lock_guard lock(world->mutex);
      return world->may_resume(r);
    });
  } else {
    std::vector<std::jthread> threads;
    try {
      for (int r = 0; r < size_; ++r) threads.emplace_back(rank_main, r);
    } catch (...) {
      std::lock_guard lock(world->mutex);  // ranks already started must not wait for the ones that never will
      world->abort("could not start " + std::to_string(size_) + " rank threads");
      throw;
    }
  }  // joins
  if (first_failure >= 0) std::rethrow_exception(errors[std::size_t(first_failure)]);
  if (world->aborted()) throw WorldAborted(world->abort_reason());
}

}  // namespace moe
