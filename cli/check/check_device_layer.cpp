#include "cli/check/check_device_layer.hpp"

#include "cli/check/check_suite.hpp"
#include "formats/config_json.hpp"

#ifdef MOE_ORACLE_HAVE_CUDA
#include "cuda/device_layer_check.hpp"
#endif

#include <set>
#include <stdexcept>

namespace moe::cli {

std::vector<DeviceLayerRun> run_device_layers(const std::vector<CheckRun>& checked, Precision dtype,
                                              Kernels kernels) {
#ifdef MOE_ORACLE_HAVE_CUDA
  const Precision precision = dtype == Precision::float64 ? Precision::float64 : Precision::float32;
  const cuda::GemmMode mode = gemm_mode(kernels);
  std::vector<DeviceLayerRun> runs;
  std::set<const CheckRow*> rows_seen;  // a row's runs (its layouts × dispatchers) share its layer
  std::set<std::string> seen;            // the layers already compared, as their config's JSON
  for (const CheckRun& checked_run : checked) {
    const CheckRow& row = *checked_run.row;
    if (!rows_seen.insert(&row).second) continue;
    const MoeConfig layer = row.run.model().layer;
    if (!seen.insert(formats::config_to_json(layer).dump()).second) continue;
    DeviceLayerRun run{row_label(row), {}, {}, true, {}, {}};
    try {
      const cuda::RoutedLayer routed = cuda::routed_layer_of(layer);
      run.left_out = routed.left_out;
      const cuda::DeviceLayerComparison c =
          cuda::compare_device_layer(routed.config, 64, unsigned(row.run.seed), precision, mode);
      run.pass = c.pass;
      run.max_abs = c.max_abs;
      run.first_failure = c.first_failure;
    } catch (const std::invalid_argument& e) {
      run.not_run = e.what();
    }
    runs.push_back(std::move(run));
  }
  return runs;
#else
  (void)checked, (void)dtype, (void)kernels;
  throw std::invalid_argument("the device layer needs a build with the CUDA backend");
#endif
}

void print_device_layers(const std::vector<DeviceLayerRun>& runs, std::ostream& out) {
  if (runs.empty()) return;
  int compared = 0, failed = 0;
  out << "\ndevice layer (cuda/expert_layer.hpp, forward + backward on one GPU, the code cuda_bench times) against "
         "the oracle's layer, 64 tokens, through its routed experts; each cell: max |device − oracle|\n";
  for (const DeviceLayerRun& r : runs) {
    out << "  " << r.row << ": ";
    if (!r.not_run.empty()) {
      out << "not run (" << r.not_run << ")\n";
      continue;
    }
    ++compared;
    failed += !r.pass;
    for (const auto& [tensor, error] : r.max_abs) out << tensor << " " << one_digit(error) << "  ";
    out << (r.pass ? "PASS" : "FAIL: " + r.first_failure);
    if (!r.left_out.empty()) {
      out << " (without:";
      for (std::size_t i = 0; i < r.left_out.size(); ++i) out << (i ? ", " : " ") << r.left_out[i];
      out << ")";
    }
    out << "\n";
  }
  out << "device layer: " << compared - failed << " of " << compared << " layers passed, "
      << runs.size() - std::size_t(compared) << " not run\n";
}

nlohmann::json device_layers_json(const std::vector<DeviceLayerRun>& runs) {
  nlohmann::json out = nlohmann::json::array();
  for (const DeviceLayerRun& r : runs) {
    nlohmann::json e{{"row", r.row}, {"left_out", r.left_out}};
    if (!r.not_run.empty()) {
      e["not_run"] = r.not_run;
    } else {
      e["pass"] = r.pass;
      for (const auto& [tensor, error] : r.max_abs) e["max_abs"][tensor] = error;
      if (!r.pass) e["first_failure"] = r.first_failure;
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace moe::cli
