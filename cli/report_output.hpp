// Every report a command writes is checked after it is written: its table or JSON on standard output, and the files
// it is told to write (check --junit, step --html). A report lost on a full disk or a device that refuses it must
// not leave exit status 0 behind: a CI that reads a missing or truncated JUnit file, or an empty JSON, next to a
// passing status believes the run passed. Any such loss is ReportLost, which main() turns into one line,
// "cannot write the report: <where> (<why>)", and exit status 2, whatever the command's verdict was.
#pragma once

#include <stdexcept>
#include <string>

namespace moe::cli {

class ReportLost : public std::runtime_error {
 public:
  // `where`: "standard output", "--junit out.xml"; `error`: the errno of the failed call (0: not known).
  ReportLost(const std::string& where, int error);
};

// Creates or truncates the file at `path` and writes `text` into it, then flushes and closes it, each step checked
// (a full disk often shows only at the flush or the close). `option` names where the path came from in the message
// ("--junit"). Throws ReportLost.
void write_report_file(const std::string& option, const std::string& path, const std::string& text);

// Flushes standard output (std::cout and printf share stdio's buffer) and throws ReportLost when anything written
// to it was lost, now or at an earlier flush. main() calls it once every command has written its report.
void finish_standard_output();

}  // namespace moe::cli
