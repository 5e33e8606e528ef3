#include "golden/case_oracle.hpp"

#include "reference/random_init.hpp"

#include <algorithm>
#include <vector>

namespace moe::golden {
namespace {

// Row-major Eigen matrix <-> a 2-D array (both C order, so the data is copied as is). Reals are stored as double
// whatever T is (a float widens exactly, so a float result survives the trip back).
template <typename T>
NpyArray from_matrix(const Matrix<T>& m) {
  return NpyArray::of_reals({m.rows(), m.cols()}, std::vector<double>(m.data(), m.data() + m.size()));
}

NpyArray from_index_matrix(const IndexMatrix& m) {
  return NpyArray::of_integers({m.rows(), m.cols()}, {m.data(), m.data() + m.size()});
}

template <typename T>
NpyArray from_vector(const Vector<T>& v) {
  return NpyArray::of_reals({v.size()}, std::vector<double>(v.data(), v.data() + v.size()));
}

NpyArray from_scalar(double value) { return NpyArray::of_reals({}, {value}); }

// E × [r, c] -> [E, r, c]
template <typename T>
NpyArray from_stack(const std::vector<Matrix<T>>& ms) {
  std::vector<double> values;
  for (const auto& m : ms) values.insert(values.end(), m.data(), m.data() + m.size());
  const auto r = ms.empty() ? 0 : ms.front().rows(), c = ms.empty() ? 0 : ms.front().cols();
  return NpyArray::of_reals({static_cast<std::int64_t>(ms.size()), r, c}, std::move(values));
}

template <typename T>
Matrix<T> to_matrix(const NpyArray& a) {
  Matrix<T> m(a.shape[0], a.shape[1]);
  std::transform(a.reals.begin(), a.reals.end(), m.data(), [](double v) { return static_cast<T>(v); });
  return m;
}

IndexMatrix to_index_matrix(const NpyArray& a) {
  IndexMatrix m(a.shape[0], a.shape[1]);
  std::copy(a.integers.begin(), a.integers.end(), m.data());
  return m;
}

template <typename T>
std::vector<Matrix<T>> to_stack(const NpyArray& a) {
  std::vector<Matrix<T>> ms;
  const auto per = a.shape[1] * a.shape[2];
  for (std::int64_t e = 0; e < a.shape[0]; ++e) {
    Matrix<T> m(a.shape[1], a.shape[2]);
    std::transform(a.reals.begin() + e * per, a.reals.begin() + (e + 1) * per, m.data(),
                   [](double v) { return static_cast<T>(v); });
    ms.push_back(std::move(m));
  }
  return ms;
}

const NpyArray& tensor(const TensorMap& tensors, const std::string& name) {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw CaseFormatError("missing tensor '" + name + "'");
  return it->second;
}

}  // namespace

template <typename T>
Matrix<T> matrix_from_tensor(const NpyArray& array) {
  return to_matrix<T>(array);
}

template <typename T>
MoeParams<T> params_from_tensors(const MoeConfig& config, const TensorMap& t) {
  MoeParams<T> p;
  p.router_weight = to_matrix<T>(tensor(t, "router_weight"));
  p.expert_fc1 = to_stack<T>(tensor(t, "expert_fc1"));
  p.expert_fc2 = to_stack<T>(tensor(t, "expert_fc2"));
  if (config.hash_routing) p.tid2eid = to_index_matrix(tensor(t, "tid2eid"));
  if (config.expert_bias) {
    const auto& b = tensor(t, "expert_bias").reals;
    p.expert_bias = Eigen::Map<const Vector<double>>(b.data(), static_cast<Eigen::Index>(b.size())).cast<T>();
  }
  if (config.has_shared_expert()) {
    p.shared_fc1 = to_matrix<T>(tensor(t, "shared_fc1"));
    p.shared_fc2 = to_matrix<T>(tensor(t, "shared_fc2"));
  }
  if (config.shared_expert_gate) p.shared_gate = to_matrix<T>(tensor(t, "shared_gate"));
  if (config.latent_size > 0) {
    p.latent_down = to_matrix<T>(tensor(t, "latent_down"));
    p.latent_up = to_matrix<T>(tensor(t, "latent_up"));
  }
  return p;
}

template <typename T>
MoeInputs<T> inputs_from_tensors(const MoeConfig& config, int seq, int batch, const TensorMap& t) {
  MoeInputs<T> in;
  in.seq = seq;
  in.batch = batch;
  in.x = to_matrix<T>(tensor(t, "x"));
  if (config.hash_routing) in.input_ids = to_index_matrix(tensor(t, "input_ids"));
  return in;
}

OracleInputs oracle_inputs(const GoldenCase& c) {
  const CaseHeader& h = c.header;
  return {params_from_tensors<double>(h.config, c.tensors),
          inputs_from_tensors<double>(h.config, h.seq, h.batch, c.tensors), to_matrix<double>(tensor(c.tensors, "grad_y"))};
}

TensorMap input_tensors(const MoeConfig& config, const OracleInputs& in) {
  const auto& p = in.params;
  TensorMap t;
  t.emplace("x", from_matrix(in.inputs.x));
  t.emplace("router_weight", from_matrix(p.router_weight));
  t.emplace("expert_fc1", from_stack(p.expert_fc1));
  t.emplace("expert_fc2", from_stack(p.expert_fc2));
  t.emplace("grad_y", from_matrix(in.grad_y));
  if (config.hash_routing) {
    t.emplace("input_ids", from_index_matrix(in.inputs.input_ids));
    t.emplace("tid2eid", from_index_matrix(p.tid2eid));
  }
  if (config.expert_bias) t.emplace("expert_bias", from_vector(p.expert_bias));
  if (config.has_shared_expert()) {
    t.emplace("shared_fc1", from_matrix(p.shared_fc1));
    t.emplace("shared_fc2", from_matrix(p.shared_fc2));
  }
  if (config.shared_expert_gate) t.emplace("shared_gate", from_matrix(p.shared_gate));
  if (config.latent_size > 0) {
    t.emplace("latent_down", from_matrix(p.latent_down));
    t.emplace("latent_up", from_matrix(p.latent_up));
  }
  return t;
}

template <typename T>
TensorMap forward_tensors(const MoeConfig& config, const MoeForward<T>& fwd) {
  const auto& r = fwd.routing;
  TensorMap out;
  out.emplace("y", from_matrix(fwd.y));
  out.emplace("probs", from_matrix(r.probs));
  out.emplace("routing_map", NpyArray::of_booleans({r.routing_map.rows(), r.routing_map.cols()},
                                                   {r.routing_map.data(), r.routing_map.data() + r.routing_map.size()}));
  out.emplace("tokens_per_expert", NpyArray::of_integers({static_cast<std::int64_t>(r.tokens_per_expert.size())},
                                                         r.tokens_per_expert));
  if (config.expert_bias && config.bias_update_rate) out.emplace("expert_bias_updated", from_vector(fwd.expert_bias_updated));
  if (config.aux_loss_type != AuxLossType::none) out.emplace("aux_loss", from_scalar(fwd.aux_loss));
  if (config.z_loss_coeff > 0) out.emplace("z_loss", from_scalar(fwd.z_loss));
  return out;
}

template <typename T>
TensorMap gradient_tensors(const MoeConfig& config, const MoeGradients<T>& grads) {
  TensorMap out;
  out.emplace("grad_x", from_matrix(grads.x));
  out.emplace("grad_router_weight", from_matrix(grads.params.router_weight));
  out.emplace("grad_expert_fc1", from_stack(grads.params.expert_fc1));
  out.emplace("grad_expert_fc2", from_stack(grads.params.expert_fc2));
  if (config.has_shared_expert()) {
    out.emplace("grad_shared_fc1", from_matrix(grads.params.shared_fc1));
    out.emplace("grad_shared_fc2", from_matrix(grads.params.shared_fc2));
  }
  if (config.shared_expert_gate) out.emplace("grad_shared_gate", from_matrix(grads.params.shared_gate));
  if (config.latent_size > 0) {
    out.emplace("grad_latent_down", from_matrix(grads.params.latent_down));
    out.emplace("grad_latent_up", from_matrix(grads.params.latent_up));
  }
  return out;
}

TensorMap oracle_outputs(const MoeConfig& config, const OracleInputs& in) {
  const auto fwd = moe_forward(config, in.params, in.inputs);
  TensorMap out = forward_tensors(config, fwd);
  out.merge(gradient_tensors(config, moe_backward(config, in.params, in.inputs, fwd, in.grad_y)));
  return out;
}

GoldenCase oracle_case(const MoeConfig& config, int seq, int batch, int vocab, std::uint64_t seed,
                       const Tolerance& tolerance, const std::string& description) {
  config.validate();
  OracleInputs in;
  in.params = random_params<double>(config, vocab, seed);
  in.inputs = random_inputs<double>(config, seq, batch, vocab, seed + 1);
  in.grad_y = random_grad_y<double>(config, seq * batch, seed + 2);

  GoldenCase c;
  c.header = {description, config, seq, batch, tolerance};
  c.tensors = input_tensors(config, in);
  c.tensors.merge(oracle_outputs(config, in));
  return c;
}

template MoeParams<double> params_from_tensors<double>(const MoeConfig&, const TensorMap&);
template MoeParams<float> params_from_tensors<float>(const MoeConfig&, const TensorMap&);
template MoeInputs<double> inputs_from_tensors<double>(const MoeConfig&, int, int, const TensorMap&);
template MoeInputs<float> inputs_from_tensors<float>(const MoeConfig&, int, int, const TensorMap&);
template Matrix<double> matrix_from_tensor<double>(const NpyArray&);
template Matrix<float> matrix_from_tensor<float>(const NpyArray&);
template TensorMap forward_tensors<double>(const MoeConfig&, const MoeForward<double>&);
template TensorMap forward_tensors<float>(const MoeConfig&, const MoeForward<float>&);
template TensorMap gradient_tensors<double>(const MoeConfig&, const MoeGradients<double>&);
template TensorMap gradient_tensors<float>(const MoeConfig&, const MoeGradients<float>&);

}  // namespace moe::golden
