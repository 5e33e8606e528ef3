// `check --kernels cuda`'s second part: the device layer (cuda/expert_layer.hpp, forward and backward on one GPU, the
// code cuda_bench times) against the oracle's layer, once per distinct layer of the rows checked, through its routed
// experts (cuda/device_layer_check.hpp says what that leaves out and what it cannot run). The first part, the
// parallel system with its data work on the GPU, is the report above it.
#pragma once

#include "cli/check/check_report.hpp"
#include "cli/check/check_rows.hpp"
#include "reference/tolerance.hpp"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace moe::cli {

struct DeviceLayerRun {
  std::string row;                                      // the first row with this layer
  std::vector<std::string> left_out;                    // what the layer has that its routed experts do not
  std::string not_run;                                  // why it was not compared (empty: it was)
  bool pass = true;
  std::vector<std::pair<std::string, double>> max_abs;  // per tensor
  std::string first_failure;
};

// One run per distinct layer; double for --dtype double, float otherwise (bf16 storage is among what is left out).
// Throws std::invalid_argument in a build without the CUDA backend.
// The rows are those of `runs` (so --filter applies).
std::vector<DeviceLayerRun> run_device_layers(const std::vector<CheckRun>& runs, Precision dtype, Kernels kernels);

void print_device_layers(const std::vector<DeviceLayerRun>& runs, std::ostream& out);
nlohmann::json device_layers_json(const std::vector<DeviceLayerRun>& runs);

}  // namespace moe::cli
