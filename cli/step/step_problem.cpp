#include "cli/step/step_problem.hpp"

#include "reference/presets.hpp"
#include "reference/random_init.hpp"

#include <stdexcept>
#include <string>

namespace moe::step {
namespace {

ParallelLayout expert_layout(int world, int ep, int etp) {
  ParallelLayout l;
  l.world = world;
  l.ep = ep;
  l.etp = etp;
  l.validate();
  return l;
}

}  // namespace

StepProblem seed_example(std::uint64_t seed, dist::DispatcherKind kind) {
  StepProblem p;
  p.name = "seed-000-ep2";
  MoeConfig& c = p.config;
  c.hidden = 4;
  c.num_experts = 4;
  c.topk = 2;
  c.ffn_hidden = 4;
  c.score_function = ScoreFunction::sqrtsoftplus;  // as DeepSeek-V4's hash layers
  c.hash_routing = true;
  c.validate();
  p.layout = expert_layout(2, 2, 1);
  p.tokens_per_rank = 2;

  const int vocab = 4;
  p.params = random_params<double>(c, vocab, seed);
  p.params.tid2eid.resize(vocab, 2);
  p.params.tid2eid << 0, 2,   // a
                      1, 3,   // b
                      1, 3,   // c
                      2, 3;   // d
  p.input_ids = IndexVector::LinSpaced(4, 0, 3);  // token a has id 0, …, d has id 3
  SeededUniform rng(seed + 1);
  p.x = rng.matrix<double>(4, c.hidden, 1.0);
  p.grad_y = random_grad_y<double>(c, 4, seed + 2);
  p.notes = {
      "seed 000's 4-token EP2 example: 4 experts, rank 0 holds e0 e1, rank 1 holds e2 e3; tokens a b on rank 0, "
      "c d on rank 1; top-2.",
      "routing is forced by a tid2eid hash table (DeepSeek-V4 hash layer, I_t = tid2eid[id_t]), chosen to give the "
      "seed's numbers: a→{e0,e2} b→{e1,e3} c→{e1,e3} d→{e2,e3}; weights g come from the sqrtsoftplus scores."};
  switch (kind) {
    case dist::DispatcherKind::alltoall:
      p.notes.push_back("expected (seed): rank 0 sends [2,2] rows, rank 1 sends [1,3]; output_splits [2,1] and [2,3]; "
                        "the ranks receive 3 and 5 rows.");
      break;
    case dist::DispatcherKind::allgather:
      p.notes.push_back("expected: every rank gathers all 4 tokens (peer_tokens [2,2]) and keeps the rows of its own "
                        "experts: rank 0 e0 {a}, e1 {b,c} = 3 rows; rank 1 e2 {a,d}, e3 {b,c,d} = 5 rows.");
      break;
    case dist::DispatcherKind::flex:
      p.notes.push_back("expected: a token goes once to each rank holding any of its experts: rank 0 sends [2,2] "
                        "tokens, rank 1 sends [1,2] (d goes to rank 1 once, for e2 and e3); rank 0 receives 3 tokens "
                        "= 3 expert rows, rank 1 receives 4 tokens = 5 expert rows.");
      break;
  }
  p.notes.push_back("The numbers below are what the dispatcher computed.");
  return p;
}

StepProblem preset_example(const LayerPreset& lp, int world, int ep, int etp, int tokens_per_rank,
                           std::uint64_t seed) {
  if (tokens_per_rank < 1) throw std::invalid_argument("step: --tokens must be at least 1 per rank");
  StepProblem p;
  p.name = lp.name;
  p.config = lp.config;
  // The routed branch only, so that the stepped output is the whole layer's output.
  p.config.shared_expert_ffn_hidden = 0;
  p.config.shared_expert_gate = false;
  p.config.latent_size = 0;
  p.config.aux_loss_type = AuxLossType::none;
  p.config.aux_loss_coeff = 0;
  p.config.z_loss_coeff = 0;
  p.config.bias_update_rate.reset();
  p.config.hash_routing = false;
  p.config.validate();
  p.layout = expert_layout(world, ep, etp);
  if (p.config.num_experts % ep != 0)
    throw std::invalid_argument("step: ep (" + std::to_string(ep) + ") must divide num_experts (" +
                                std::to_string(p.config.num_experts) + ")");
  p.tokens_per_rank = tokens_per_rank;
  p.params = random_params<double>(p.config, lp.vocab, seed);
  p.x = SeededUniform(seed + 1).matrix<double>(p.tokens(), p.config.hidden, 1.0);
  p.grad_y = random_grad_y<double>(p.config, p.tokens(), seed + 2);
  p.notes = {lp.description + "; routed branch only (shared expert, latent and aux losses off).",
             "routing by the layer's own router on random tokens (seed " + std::to_string(seed) + ")."};
  return p;
}

}  // namespace moe::step
