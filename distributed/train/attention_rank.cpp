#include "distributed/train/attention_rank.hpp"

#include "distributed/comm/row_collectives.hpp"
#include "reference/bf16.hpp"

#include <stdexcept>
#include <string>

namespace moe::dist {

AttentionConfig tp_attention_config(const AttentionConfig& config, int tp) {
  if (config.heads % tp != 0 || config.groups % tp != 0)
    throw std::invalid_argument("attention: tp (" + std::to_string(tp) + ") must divide the heads (" +
                                std::to_string(config.heads) + ") and the key/value groups (" +
                                std::to_string(config.groups) + ")");
  AttentionConfig c = config;
  c.heads /= tp;
  c.groups /= tp;
  return c;
}

AttentionWeights<double> tp_attention_slice(const AttentionConfig& config, const AttentionWeights<double>& global,
                                            int tp, int tp_rank) {
  const AttentionConfig local = tp_attention_config(config, tp);
  const Eigen::Index qd = Eigen::Index{local.heads} * local.head_dim, kd = Eigen::Index{local.groups} * local.head_dim;
  return {global.wq.middleRows(tp_rank * qd, qd), global.wk.middleRows(tp_rank * kd, kd),
          global.wv.middleRows(tp_rank * kd, kd), global.wo.middleCols(tp_rank * qd, qd)};
}

AttentionRank::AttentionRank(const AttentionConfig& config, const AttentionWeights<double>& weights,
                             const RankGroups& comms, KvExchange exchange, int batch, int seq)
    : config_(tp_attention_config(config, comms.tp->size())),
      weights_(weights),
      comms_(comms),
      exchange_(exchange),
      batch_(batch),
      seq_(seq) {}

Matrix<double> AttentionRank::forward(const Matrix<double>& x) {
  // The data split gives every TP rank an equal slice of the CP rank's positions (global_step.hpp), so every
  // rank's row count is this one's: no collective needed to learn them.
  sp_rows_.assign(static_cast<size_t>(comms_.tp->size()), x.rows());
  x_ = allgatherv_rows(*comms_.tp, x, sp_rows_);
  forward_ = cp_attention_forward(config_, weights_, x_, batch_, seq_, *comms_.cp, exchange_);
  return stored(config_.bf16, reduce_scatterv_rows(*comms_.tp, forward_.out, sp_rows_));  // whole once reduced
}

Matrix<double> AttentionRank::backward(const Matrix<double>& dout, AttentionWeights<double>& grads) {
  const Matrix<double> dout_cp = allgatherv_rows(*comms_.tp, dout, sp_rows_);
  const AttentionGrads g =
      cp_attention_backward(config_, weights_, x_, batch_, seq_, *comms_.cp, exchange_, forward_, dout_cp);
  grads.wq += g.params.wq;
  grads.wk += g.params.wk;
  grads.wv += g.params.wv;
  grads.wo += g.params.wo;
  return stored(config_.bf16, reduce_scatterv_rows(*comms_.tp, g.dx, sp_rows_));  // whole once reduced
}

}  // namespace moe::dist
