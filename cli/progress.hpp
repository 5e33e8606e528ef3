// Progress of long work, for a person at a terminal: one line on stderr, "compare: 3/9 layer passes, about 40 s
// left", redrawn at most four times a second and erased when the work ends. Silent when stderr is not a terminal
// (a log, a pipe, CI) or when the command prints JSON, so that no output that is read by a program changes.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace moe::cli {

class Progress {
 public:
  // `what` names the work ("compare"), `unit` the steps ("layer passes"); `quiet` for --json.
  Progress(std::string what, std::string unit, long total, bool quiet)
      : what_(std::move(what)), unit_(std::move(unit)), total_(total), shown_(!quiet && ::isatty(2) == 1),
        start_(Clock::now()), last_(start_) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() {
    if (shown_ && drawn_) std::fprintf(stderr, "\r\033[K");
  }

  void step() {
    ++done_;
    const auto now = Clock::now();
    if (!shown_ || (now - last_ < std::chrono::milliseconds(250) && done_ < total_)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double left = done_ > 0 ? elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0;
    std::fprintf(stderr, "\r\033[K%s: %ld/%ld %s, about %.0f s left", what_.c_str(), done_, total_, unit_.c_str(), left);
    std::fflush(stderr);
    drawn_ = true;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_, unit_;
  long total_ = 0, done_ = 0;
  bool shown_ = false, drawn_ = false;
  Clock::time_point start_, last_;
};

}  // namespace moe::cli
