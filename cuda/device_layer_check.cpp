#include "cuda/device_layer_check.hpp"

#include "cuda/device_buffer.hpp"
#include "cuda/expert_layer.hpp"
#include "reference/moe_layer.hpp"

#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace moe::cuda {

RoutedLayer routed_layer_of(const MoeConfig& config) {
  if (config.capacity_factor)
    throw std::invalid_argument("capacity: dropping and padding are host control; the device layer is dropless");
  if (config.hash_routing) throw std::invalid_argument("hash routing: the device layer takes no token ids");
  if (config.apply_probs_on_input)
    throw std::invalid_argument("probabilities on the input: the device layer applies them after the activation");
  RoutedLayer r{config, {}};
  MoeConfig& c = r.config;
  const auto drop = [&](bool had, const char* what) {
    if (had) r.left_out.emplace_back(what);
  };
  drop(c.has_shared_expert(), "shared expert");
  c.shared_expert_ffn_hidden = 0;
  c.shared_expert_gate = false;
  c.shared_expert_clamp = false;
  drop(c.latent_size > 0, "latent projection (experts at width h)");
  c.latent_size = 0;
  drop(c.aux_loss_type != AuxLossType::none, "balance loss");
  c.aux_loss_type = AuxLossType::none;
  c.aux_loss_coeff = 0;
  drop(c.z_loss_coeff != 0, "z loss");
  c.z_loss_coeff = 0;
  drop(c.bias_update_rate.has_value(), "bias update");
  c.bias_update_rate.reset();
  drop(c.bf16_storage, "bf16 storage");
  c.bf16_storage = false;
  drop(c.fp8_dispatch, "FP8 dispatch");
  c.fp8_dispatch = false;
  c.validate();
  return r;
}

namespace {

// Values rounded through the device type, so that the oracle and the device start from the same numbers.
template <typename T>
Matrix<double> random_matrix(Eigen::Index rows, Eigen::Index cols, std::mt19937& gen, double scale) {
  std::uniform_real_distribution<double> u(-scale, scale);
  Matrix<double> m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = double(T(u(gen)));
  return m;
}

template <typename T>
std::vector<T> as(const Matrix<double>& m) {
  std::vector<T> out(std::size_t(m.size()));
  for (Eigen::Index i = 0; i < m.size(); ++i) out[std::size_t(i)] = T(m.data()[i]);
  return out;
}

template <typename T>
std::vector<T> stacked(const std::vector<Matrix<double>>& ms) {
  std::vector<T> out;
  for (const auto& m : ms)
    for (Eigen::Index i = 0; i < m.size(); ++i) out.push_back(T(m.data()[i]));
  return out;
}

// Records tensor `name`'s largest |got − want| and its first element outside the tolerance.
template <typename T>
void compare(const std::string& name, const std::vector<T>& got, const std::vector<double>& want,
             DeviceLayerComparison& out) {
  if (got.size() != want.size()) throw std::logic_error("device layer check: " + name + " has the wrong size");
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = double(got[i]), diff = std::abs(g - want[i]);
    worst = std::isnan(diff) ? diff : std::max(worst, diff);
    if (!out.tolerance.admits(g, want[i]) && out.pass) {
      out.pass = false;
      std::ostringstream where;
      where << name << "[" << i << "]: got " << g << ", oracle " << want[i];
      out.first_failure = where.str();
    }
  }
  out.max_abs.emplace_back(name, worst);
}

std::vector<double> flat(const Matrix<double>& m) { return {m.data(), m.data() + m.size()}; }
std::vector<double> flat(const std::vector<Matrix<double>>& ms) {
  std::vector<double> out;
  for (const auto& m : ms) out.insert(out.end(), m.data(), m.data() + m.size());
  return out;
}

template <typename T>
DeviceLayerComparison compare_in(const MoeConfig& c, int n, unsigned seed, Precision precision, GemmMode mode) {
  const int h = c.hidden, E = c.num_experts, d = c.ffn_hidden;
  std::mt19937 gen(seed);
  MoeParams<double> p;
  p.router_weight = random_matrix<T>(E, h, gen, 0.3);
  if (c.expert_bias) p.expert_bias = random_matrix<T>(E, 1, gen, 0.1).col(0);
  for (int e = 0; e < E; ++e) {
    p.expert_fc1.push_back(random_matrix<T>(2 * d, h, gen, 0.3));
    p.expert_fc2.push_back(random_matrix<T>(h, d, gen, 0.3));
  }
  MoeInputs<double> in;
  in.seq = n;
  in.batch = 1;
  in.x = random_matrix<T>(n, h, gen, 1.0);
  const Matrix<double> gy = random_matrix<T>(n, h, gen, 1.0);
  const MoeForward<double> fwd = moe_forward(c, p, in, ExpertPath::expert_batched);
  const MoeGradients<double> want = moe_backward(c, p, in, fwd, gy, LossScales{}, ExpertPath::expert_batched);

  const auto d_x = DeviceBuffer<T>::from_host(as<T>(in.x)), d_gy = DeviceBuffer<T>::from_host(as<T>(gy));
  const auto d_w = DeviceBuffer<T>::from_host(as<T>(p.router_weight));
  const auto d_bias = DeviceBuffer<T>::from_host(as<T>(Matrix<double>(p.expert_bias)));
  const auto d_f1 = DeviceBuffer<T>::from_host(stacked<T>(p.expert_fc1));
  const auto d_f2 = DeviceBuffer<T>::from_host(stacked<T>(p.expert_fc2));
  DeviceExpertLayer<T> layer;
  layer.spec = router_spec(c);
  layer.options.clamp = c.routed_clamp();
  layer.options.clamp_limit_passes = c.clamp_limit_passes();
  layer.router_weight = d_w.data();
  layer.expert_bias = c.expert_bias ? d_bias.data() : nullptr;
  layer.experts = {d_f1.data(), d_f2.data(), h, d};

  DeviceContext ctx(mode);
  DeviceBuffer<T> y(std::size_t(n * h)), dx(std::size_t(n * h)), g1(d_f1.size()), g2(d_f2.size()), gw(d_w.size());
  g1.zero(ctx.stream());
  g2.zero(ctx.stream());
  gw.zero(ctx.stream());
  {
    const auto saved = expert_layer_forward<T>(ctx, layer, d_x.data(), n, y.data());
    expert_layer_backward<T>(ctx, layer, saved, d_x.data(), n, d_gy.data(), dx.data(), gw.data(), g1.data(),
                             g2.data());
    ctx.synchronize();
  }
  DeviceLayerComparison out;
  out.tolerance = moe::tolerance(Compared::layer, precision);
  compare("y", y.to_host(), flat(fwd.y), out);
  compare("dx", dx.to_host(), flat(want.x), out);
  compare("grad router", gw.to_host(), flat(want.params.router_weight), out);
  compare("grad fc1", g1.to_host(), flat(want.params.expert_fc1), out);
  compare("grad fc2", g2.to_host(), flat(want.params.expert_fc2), out);
  return out;
}

}  // namespace

DeviceLayerComparison compare_device_layer(const MoeConfig& routed, int tokens, unsigned seed, Precision precision,
                                           GemmMode mode) {
  if (precision == Precision::float64) return compare_in<double>(routed, tokens, seed, precision, mode);
  if (precision == Precision::float32) return compare_in<float>(routed, tokens, seed, precision, mode);
  throw std::invalid_argument("device layer check: runs in double or float (bf16 storage is left out)");
}

}  // namespace moe::cuda
