#include "cli/report_output.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

namespace moe::cli {

ReportLost::ReportLost(const std::string& where, int error)
    : std::runtime_error("cannot write the report: " + where + " (" +
                         (error != 0 ? std::string(std::strerror(error)) : "an earlier write failed") + ")") {}

void write_report_file(const std::string& option, const std::string& path, const std::string& text) {
  const std::string where = option + " " + path;
  errno = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) throw ReportLost(where, errno);
  if (std::fwrite(text.data(), 1, text.size(), file.get()) != text.size() || std::fflush(file.get()) != 0)
    throw ReportLost(where, errno);
  if (std::fclose(file.release()) != 0) throw ReportLost(where, errno);
}

void finish_standard_output() {
  // std::cout, synced with stdio, writes into stdout's buffer: one fflush sends what both wrote. It comes first, as
  // its errno says why; stdio drops a buffer it failed to write, so a second flush would succeed on nothing.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  int error = flushed ? 0 : errno;
  // ferror: a flush of a full buffer mid-report failed, its errno gone by now; !std::cout: a short write.
  if (flushed && !std::ferror(stdout) && std::cout) return;
  // Why, where the descriptor still says: a write of zero bytes writes nothing, but a device that refuses every
  // write (/dev/full), a closed descriptor or a failing one answers it with its error.
  if (error == 0 && ::write(STDOUT_FILENO, "", 0) < 0) error = errno;
  throw ReportLost("standard output", error);
}

}  // namespace moe::cli
