// Layouts and what follows from them alone: the parallel layout dict, the process groups of a rank
// (reference/process_groups.hpp over rank_generator.hpp), and the gradient-scaling and loss-scale tables
// (reference/scaling_rules.hpp) evaluated on the layout's group sizes. Row fields are named as `moe-oracle scaling
// --json` names them.
#include "python/src/arrays.hpp"
#include "python/src/bindings.hpp"
#include "reference/process_groups.hpp"
#include "reference/scaling_rules.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

namespace moe::python {
namespace {

py::dict layout_to_dict(const ParallelLayout& l) {
  py::dict d;
  d["world"] = l.world;
  d["tp"] = l.tp;
  d["cp"] = l.cp;
  d["pp"] = l.pp;
  d["ep"] = l.ep;
  d["etp"] = l.etp;
  d["dp"] = l.dp();
  d["edp"] = l.edp();
  d["gtp"] = l.gtp;
  d["egtp"] = l.egtp;
  d["order"] = l.order;
  return d;
}

py::dict grad_sync_dict(const GradSync& r) {
  py::dict d;
  d["param_class"] = std::string(to_string(r.rule.param_class));
  d["loss_mode"] = std::string(to_string(r.rule.loss_mode));
  d["prescale"] = r.prescale;
  d["prescale_formula"] = r.prescale_formula;
  d["prescale_values"] = r.prescale_values;
  d["gtp_correction"] = r.rule.gtp_correction;
  d["collective"] = r.collective;
  d["reduce_op"] = std::string(to_string(r.rule.op));
  d["group"] = std::string(to_string(r.rule.group));
  d["group_size"] = r.group_size;
  d["then_sum_over_tp"] = r.rule.then_sum_over_tp;
  d["gtp_step"] = std::string(to_string(r.rule.gtp_step));
  d["gtp_group_size"] = r.gtp_size;
  d["tp_size"] = r.tp_size;
  d["divide_by_global_tokens"] = r.rule.divide_by_global_tokens;
  d["net_factor"] = r.net_factor;
  d["source"] = std::string(r.rule.source);
  return d;
}

py::dict loss_scale_dict(const LossScale& r, LossMode mode) {
  std::vector<std::string> when;
  for (Deviation dev : r.rule.when) when.emplace_back(deviation_info(dev).name);
  py::dict d;
  d["term"] = std::string(to_string(r.rule.term));
  d["formula"] = std::string(r.rule.formula);
  d["values"] = r.values;
  d["factor"] = r.factor;
  d["token_count"] = std::string(to_string(r.rule.tokens));
  d["deviations"] = when;
  d["divide_by_global_tokens"] = mode == LossMode::per_token;
  d["source"] = std::string(r.rule.source);
  return d;
}

}  // namespace

ParallelLayout layout_from_dict(py::handle layout) {
  if (!py::isinstance<py::dict>(layout)) throw std::invalid_argument("layout must be a dict");
  const auto d = py::reinterpret_borrow<py::dict>(layout);
  static const std::set<std::string> sizes{"world", "tp", "cp", "pp", "ep", "etp", "dp", "gtp", "egtp"};
  std::map<std::string, int> given;
  std::string order = ParallelLayout().order;
  for (const auto& [key, value] : d) {
    const auto name = py::str(key).cast<std::string>();
    if (name == "order") {
      if (!py::isinstance<py::str>(value)) throw std::invalid_argument("layout: 'order' must be a string");
      order = value.cast<std::string>();
    } else if (sizes.count(name)) {
      if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value))
        throw std::invalid_argument("layout: '" + name + "' must be an integer");
      given[name] = cast_argument<int>(value, "layout: '" + name + "'", "an int");
    } else {
      throw std::invalid_argument("layout: unknown key '" + name +
                                  "' (known: world, tp, cp, pp, ep, etp, dp, gtp, egtp, order)");
    }
  }
  return layout_from_sizes(given, "layout", order);
}

void bind_layout(py::module_& m) {
  m.def(
      "parallel_layout", [](const py::dict& layout) { return layout_to_dict(layout_from_dict(layout)); },
      py::arg("layout"),
      R"doc(Validate a parallel layout dict and return it complete, dp and edp derived.

Keys (Megatron's names): world, tp, cp, pp, ep, etp, gtp, egtp (sizes, default 1), dp (only to derive world when it
is not given: world = tp·cp·pp·gtp·dp), order (default "tp-cp-ep-dp-pp", fastest-varying first). An unknown key or a broken
divisibility rule raises ValueError naming it.)doc");

  m.def(
      "process_groups",
      [](const py::dict& layout, const py::object& rank_arg, const py::object& num_experts_arg) {
        const int rank = int_argument(rank_arg, "rank", 0);
        std::optional<int> num_experts;
        if (!num_experts_arg.is_none()) num_experts = int_argument(num_experts_arg, "num_experts", 1);
        const ProcessGroups groups(layout_from_dict(layout));
        if (rank < 0 || rank >= groups.layout().world)
          throw std::invalid_argument("rank " + std::to_string(rank) + " is outside the world of " +
                                      std::to_string(groups.layout().world));
        py::dict out;
        for (GroupKind kind : all_group_kinds()) {
          py::dict g;
          g["ranks"] = groups.group(kind, rank);
          g["index"] = groups.rank_in(kind, rank);
          out[py::str(std::string(to_string(kind)))] = g;
        }
        if (num_experts) {
          const ExpertRange e = groups.experts_of(rank, *num_experts);
          py::dict experts;
          experts["first"] = e.first;
          experts["count"] = e.count;
          out["experts"] = experts;
        }
        return out;
      },
      py::arg("layout"), py::arg("rank"), py::arg("num_experts") = py::none(),
      R"doc(The process groups of one rank: {kind: {"ranks": [...], "index": position of rank in it}} for every kind
(tp, cp, dp, dp_cp, tp_cp, tp_dp_cp, pp from the dense mesh; ep, expt_tp, tp_ep, expt_dp from the expert mesh), in
Megatron's member order. With num_experts, also "experts": {"first", "count"}, the routed experts the rank holds.)doc");

  m.def(
      "all_process_groups",
      [](const py::dict& layout) {
        const ProcessGroups groups(layout_from_dict(layout));
        py::dict out;
        for (GroupKind kind : all_group_kinds()) out[py::str(std::string(to_string(kind)))] = groups.all_groups(kind);
        return out;
      },
      py::arg("layout"), "Every group of every kind, in the order Megatron creates them: {kind: [[ranks], ...]}.");

  m.def(
      "grad_sync_table",
      [](const std::string& mode, const py::dict& layout, bool distributed_optimizer, const Semantics& semantics) {
        const ProcessGroups groups(layout_from_dict(layout));
        py::list out;
        for (const auto& r : grad_sync_table(parse_loss_mode(mode), group_sizes(groups), distributed_optimizer, semantics))
          out.append(grad_sync_dict(r));
        return out;
      },
      py::arg("mode"), py::arg("layout"), py::arg("distributed_optimizer") = false, py::arg("semantics") = "intended",
      R"doc(How each parameter class's gradient is synchronised under a loss mode ("sum", "avg", "per-token") on a
layout: one dict per class (dense, expert, sequence_parallel) with param_class, loss_mode, prescale (value),
prescale_formula, prescale_values, gtp_correction, collective, reduce_op, group, group_size, then_sum_over_tp,
tp_size, gtp_step, gtp_group_size, divide_by_global_tokens, net_factor, source (the Megatron code it encodes). ``semantics`` is a spec string
or a Semantics (the Megatron profiles drop the GTP correction).)doc");

  m.def(
      "loss_scale_table",
      [](const std::string& mode, const py::dict& layout, const py::object& micro_batch_arg,
         const py::object& global_batch_arg, const Semantics& semantics) {
        const int micro_batch = int_argument(micro_batch_arg, "micro_batch", 1);
        const ParallelLayout l = layout_from_dict(layout);
        const ProcessGroups groups(l);
        const LossMode loss_mode = parse_loss_mode(mode);
        // The default micro_batch · dp in 64 bits: in int it could wrap to a small positive count.
        const std::int64_t global_batch = global_batch_arg.is_none()
                                              ? static_cast<std::int64_t>(micro_batch) * l.dp()
                                              : int_argument(global_batch_arg, "global_batch", 1);
        if (global_batch > std::numeric_limits<int>::max())
          throw std::invalid_argument("global_batch = micro_batch · dp = " + std::to_string(global_batch) +
                                      ", more than 2^31 - 1");
        const int m_count = num_microbatches(l, static_cast<int>(global_batch), micro_batch);
        py::list out;
        for (const auto& r : loss_scale_table(loss_mode, group_sizes(groups), m_count, semantics))
          out.append(loss_scale_dict(r, loss_mode));
        return out;
      },
      py::arg("mode"), py::arg("layout"), py::arg("micro_batch") = 1, py::arg("global_batch") = py::none(),
      py::arg("semantics") = "intended",
      R"doc(The weight of each loss term (ce, aux_loss, global_aux_loss, z_loss) in one rank's backward: one dict per term with term,
formula, values (the layout part substituted), factor (its value), token_count (the run-time count it multiplies:
none, 1/N_mb, 1/N_c, N_mb, num_local_tokens, N_step), deviations (the Megatron deviations the row encodes),
divide_by_global_tokens, source. m = global_batch / (micro_batch · dp) microbatches; global_batch defaults to
micro_batch · dp.)doc");
}

}  // namespace moe::python
