#include "cli/check/check_rows.hpp"

#include "cli/choice_option.hpp"
#include "cli/cli_checks.hpp"
#include "cli/model_options.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>

namespace moe::cli {
namespace {

// The smallest multiple of `unit` that is at least `at_least`; units are at most kMaxUnit, so that it fits an int.
constexpr long long kMaxUnit = 1 << 24;
int fit(int at_least, long long unit) { return static_cast<int>((at_least + unit - 1) / unit * unit); }

// Wave-scheduled EP runs with the AlltoAll dispatcher, without FP8 dispatch or replicas, and with at least as many
// local experts per rank as waves: what the user asked for explicitly is refused, a default row adjusted with a note.
void waves_fit(CheckOptions& o, CheckRow& r) {
  const std::string flag = "--expert-waves " + std::to_string(r.expert_waves);
  const bool waves_given = o.given("--expert-waves");
  if (o.dispatcher && *o.dispatcher != dist::DispatcherKind::alltoall) {
    const std::string dispatcher(to_string(*o.dispatcher));
    if (waves_given && o.row.expert_waves > 1)
      throw std::invalid_argument(flag + " runs with the AlltoAll dispatcher, not " + dispatcher + " (it is the "
                                  "one that returns every (token, expert) row, so waves can keep the unwaved sums)");
    o.notes.push_back("--dispatcher " + dispatcher + ": " + r.name + " with " + std::to_string(r.expert_waves) +
                      " waves left out (waves run with the AlltoAll dispatcher)");
    r.layouts.clear();
    return;
  }
  const std::string why = r.run.quant != Quant::none ? "FP8 dispatch"
                          : r.hot_expert_slots > 0    ? "replicated experts"
                                                      : "";
  if (!why.empty()) {
    if (waves_given && (o.layout.world > 0 || o.custom_model))
      throw std::invalid_argument(flag + " does not run with " + why);
    o.notes.push_back(flag + ": " + r.name + " runs unwaved (" + why + ")");
    r.expert_waves = 1;
    return;
  }
  const int E = r.run.model().layer.num_experts;
  const auto too_few = [&](const ParallelLayout& l) { return E / l.ep < r.expert_waves; };
  if (o.layout.world > 0 && too_few(o.layout))
    throw std::invalid_argument(flag + ": ep " + std::to_string(o.layout.ep) + " leaves " +
                                std::to_string(E / o.layout.ep) + " local experts per rank; each wave needs one");
  if (std::any_of(r.layouts.begin(), r.layouts.end(), too_few)) {
    std::erase_if(r.layouts, too_few);
    o.notes.push_back(flag + ": " + r.name + "'s layouts with fewer local experts than waves left out");
  }
  if (waves_given && !o.dispatcher)
    o.notes.push_back(flag + ": " + r.name + " runs the AlltoAll dispatcher only (the one that returns every row)");
}

// `option` sets `field` of every row.
template <typename T>
void sets(CheckOptions& o, const CLI::Option* option, T RowSettings::*field) {
  o.row_flags.push_back({option, [field](const RowSettings& given, RowSettings& row) { row.*field = given.*field; }});
}

// Row flags that do not combine with each other, refused before any row is made.
void refuse_given_combinations(const CheckOptions& o) {
  const RowSettings& given = o.row;
  if (o.given("--optimizer") && given.optimizer == OptimizerKind::muon && given.distributed_optimizer)
    throw std::invalid_argument("--optimizer muon runs with DDP: the distributed optimizer's flat slices cut the "
                                "matrices Newton-Schulz needs whole; drop --distributed-optimizer");
  if (!given.resume_as.empty() && given.steps < 2) throw std::invalid_argument("--resume-as needs --steps 2 or more");
  if (given.clip_grad > 0 && given.steps < 1) throw std::invalid_argument("--clip-grad needs --steps 1 or more");
}

// What --cp-comm-type and --dtype ask of the rows: attention to exchange keys over, and in float, rows the float
// parallel system runs (refused where the user asked for them, left out of the default set); bf16 rows store bf16.
void fit_dtype(CheckOptions& o, std::vector<CheckRow>& rows) {
  if (o.given("--cp-comm-type") &&
      std::none_of(rows.begin(), rows.end(), [](const CheckRow& r) { return r.run.model().has_attention(); }))
    throw std::invalid_argument("--cp-comm-type: the model has no attention (give --num-attention-heads or "
                                "--preset tiny-attention)");
  if (o.dtype == Precision::float32) {
    const std::string flag = "--dtype float";
    // The optimizer state is double: multi-step rows run in double only.
    if (o.row.steps > 0)
      throw std::invalid_argument("--steps runs in double (the optimizer state is double); drop " + flag);
    // FP8 dispatch too: in float a last-bit difference in the input can move an element across an e4m3 rounding
    // boundary, an error of up to 1/16 of it that no float tolerance admits.
    if (o.run.quant != Quant::none)
      throw std::invalid_argument("--quant " + std::string(name_of(o.run.quant)) + " runs in double only: in float "
                                  "a rounding of the input can move an element across an e4m3 rounding boundary, an "
                                  "error of up to 1/16 of it that no float tolerance admits");
    // And attention: the CPU parallel system runs it in double.
    if (o.custom_model && rows.front().run.model().has_attention())
      throw std::invalid_argument(flag + ": the parallel system runs attention in double only");
    std::erase_if(rows, [](const CheckRow& r) {
      return r.steps > 0 || r.run.quant != Quant::none || r.run.model().has_attention();
    });
  }
  if (o.dtype == Precision::bfloat16)
    for (CheckRow& r : rows) r.run.bf16_storage = true;
}

// The layout's size flags as check declares them: the common ones (layout_size_flag_names) and its own --vpp.
std::vector<std::string> layout_flags() {
  std::vector<std::string> sizes = layout_size_flag_names();
  sizes.emplace_back("--vpp");
  return sizes;
}

}  // namespace

bool CheckOptions::given(const std::string& flag) const {
  return std::any_of(row_flags.begin(), row_flags.end(),
                     [&](const RowFlag& f) { return f.option->check_name(flag) && f.option->count() > 0; });
}

void add_row_flags(CLI::App& cmd, CheckOptions& o) {
  RowSettings& row = o.row;
  sets(o, cmd.add_option("--steps", row.steps,
                         "run N whole training steps (optimizer, bias update) against the oracle's trajectory (at "
                         "most 1000: each step is a whole forward and backward of every layer)")
              ->check(CLI::Range(0, 1000)),
       &RowSettings::steps);
  sets(o, cmd.add_option("--resume-as", row.resume_as,
                         "with --steps: save after N/2 steps and resume under this layout, e.g. world=4,ep=2,etp=2"),
       &RowSettings::resume_as);
  sets(o, add_choice(cmd, "--cp-comm-type", row.cp_comm_type,
                     "with attention: how keys and values cross the cp group (p2p: a ring with an online softmax); "
                     "default: each row's own (p2p in the default set's p2p row)",
                     table_of<dist::KvExchange>(), "Megatron's a2a and a2a+p2p are not built")
              ->default_str(""),
       &RowSettings::cp_comm_type);
  sets(o, add_choice(cmd, "--optimizer", row.optimizer,
                     "with --steps (muon: Newton-Schulz on every matrix but the embedding and head, AdamW for the "
                     "rest; DDP only); default: each row's own (muon in the default set's Muon row)")
              ->default_str(""),
       &RowSettings::optimizer);
  sets(o, cmd.add_option("--clip-grad", row.clip_grad,
                         "with --steps: clip the global gradient norm to this before each update, as Megatron's "
                         "--clip-grad (each parameter counted once over every parallel axis)")
              ->check(real_above_zero(false)),
       &RowSettings::clip_grad);
  sets(o, cmd.add_option("--hot-expert-replicas", row.hot_expert_slots,
                         "replicated hot experts (HybridEP's virtual experts): up to N replica slots per layer, "
                         "planned from the batch's expert counts; a replica computes a share of a hot expert's rows "
                         "with a copy of its weights and returns its wgrad to the owner (ETP 1, no FP8 dispatch; with "
                         "--steps each step plans from the previous step's counts, the first runs unreplicated)")
              ->check(whole_at_least(1)),
       &RowSettings::hot_expert_slots);
  sets(o, cmd.add_option("--expert-waves", row.expert_waves,
                         "wave-scheduled EP (DeepSeek-V4's MegaMoE): the routed experts of each layer in N waves, "
                         "each wave's compute on a worker thread while the next is dispatched and the previous "
                         "combined; bitwise the unwaved run (AlltoAll dispatcher, N ≤ local experts per rank, no FP8 "
                         "dispatch or replicas)")
              ->check(whole_at_least(1)),
       &RowSettings::expert_waves);
  sets(o, cmd.add_flag("--distributed-optimizer", row.distributed_optimizer,
                       "shard optimizer state; reduce-scatter gradients, all-gather parameters"),
       &RowSettings::distributed_optimizer);
}

std::vector<CheckRow> rows_of(CheckOptions& o) {
  refuse_given_combinations(o);
  std::vector<CheckRow> rows;
  if (o.custom_model || o.layout.world > 0) {
    // A model file's mapping: what it assumed and which keys had no effect, as `layer` and `volume` print them.
    for (const auto& note : o.run.source.notes(o.run.semantics)) o.notes.push_back("model: " + note);
    CheckRow row{o.run.source.source(), o.run, default_rows().front().layouts};
    if (o.layout.world > 0) {
      o.layout.validate();
      row.layouts = {o.layout};
    }
    std::vector<ParallelLayout> all = row.layouts;
    if (!o.row.resume_as.empty()) all.push_back(parse_layout(o.row.resume_as, "--resume-as"));
    // In 64 bits (validated layouts: each factor ≤ world ≤ 2^20), refused past what a sequence or batch can be.
    long long seq_unit = 1, batch_unit = 1, ep = 1;
    for (const ParallelLayout& l : all) {
      seq_unit = std::lcm(seq_unit, l.cp > 1 ? std::lcm(2LL * l.cp, 1LL * l.cp * l.tp) : l.tp);
      batch_unit = std::lcm(batch_unit, 1LL * row.run.micro_batch * l.dp_with_gtp());
      ep = std::lcm(ep, 1LL * l.ep);
      if (seq_unit > kMaxUnit || batch_unit > kMaxUnit)
        throw std::invalid_argument("these layouts need a sequence length that is a multiple of " +
                                    std::to_string(seq_unit) + " and a global batch that is a multiple of " +
                                    std::to_string(batch_unit) + ": beyond 2^24; use smaller layouts or --micro-batch");
    }
    if (!o.seq_given && row.run.seq % seq_unit != 0) {
      row.run.seq = fit(row.run.seq, seq_unit);
      o.notes.push_back("seq " + std::to_string(row.run.seq) + ": the smallest ≥ 16 that the layout's tp and cp "
                        "divide as sequence and load-balanced context parallelism need (a multiple of " +
                        std::to_string(seq_unit) + ")");
    }
    if (!o.global_batch_given && row.run.global_batch % batch_unit != 0) {
      row.run.global_batch = fit(row.run.global_batch, batch_unit);
      o.notes.push_back("global batch " + std::to_string(row.run.global_batch) +
                        ": the smallest ≥ 8 that micro-batch · dp · gtp divides (" + std::to_string(batch_unit) + ")");
    }
    row.run.ep_multiple = static_cast<int>(ep);
    if (row.run.shrink) {
      const ModelConfig m = row.run.model();
      o.notes.push_back("--shrink: " + o.run.source.source() + " checked as h " + std::to_string(m.layer.hidden) +
                        ", E " + std::to_string(m.layer.num_experts) + ", k " + std::to_string(m.layer.topk) +
                        ", d " + std::to_string(m.layer.ffn_hidden) + ", " + std::to_string(m.num_layers) +
                        " layers (" + std::to_string(m.n_hash_layers) + " hash), vocab " + std::to_string(m.vocab));
    }
    rows.push_back(row);
  } else {
    rows = default_rows();
  }
  for (CheckRow& r : rows) {
    if (o.custom_semantics) r.run.semantics = o.run.semantics;
    if (o.custom_quant) r.run.quant = o.run.quant;
    for (const RowFlag& flag : o.row_flags)
      if (flag.option->count() > 0) flag.apply(o.row, r);
    if (r.steps < 2) r.resume_as.clear();
    if (r.optimizer == OptimizerKind::muon && r.distributed_optimizer && r.steps > 0) {
      // Only default rows get here (--distributed-optimizer with --optimizer muon is refused): they run with DDP.
      r.distributed_optimizer = false;
      o.notes.push_back("--optimizer muon: " + r.name + "'s distributed-optimizer row runs with DDP (Muon needs "
                        "whole matrices, the distributed optimizer cuts flat slices)");
    }
    // Replicated experts run with ETP 1 and without FP8 dispatch (HybridEP's requirements).
    if (r.hot_expert_slots > 0) {
      const std::string why = r.run.quant != Quant::none ? "FP8 dispatch" : "";
      const auto etp = [](const ParallelLayout& l) { return l.etp > 1; };
      if (o.layout.world > 0 && (!why.empty() || etp(o.layout)))
        throw std::invalid_argument("--hot-expert-replicas does not run with " + (why.empty() ? "ETP > 1" : why));
      if (!why.empty()) {
        r.hot_expert_slots = 0;
        o.notes.push_back("--hot-expert-replicas: " + r.name + " runs unreplicated (" + why + ")");
      } else if (std::any_of(r.layouts.begin(), r.layouts.end(), etp)) {
        std::erase_if(r.layouts, etp);
        o.notes.push_back("--hot-expert-replicas: " + r.name + "'s ETP > 1 layouts left out");
      }
    }
    if (r.expert_waves > 1) waves_fit(o, r);
    // GTP keeps shards of its own: the distributed optimizer and Muon do not run on GTP layouts.
    const std::string gtp_refuser = r.steps == 0              ? ""
                                    : r.distributed_optimizer ? "--distributed-optimizer"
                                    : r.optimizer == OptimizerKind::muon ? "Muon"
                                                              : "";
    const auto has_gtp = [](const ParallelLayout& l) { return l.gtp > 1 || l.egtp > 1; };
    if (!gtp_refuser.empty() && std::any_of(r.layouts.begin(), r.layouts.end(), has_gtp)) {
      if (o.layout.world > 0)
        throw std::invalid_argument(gtp_refuser + " does not run GTP layouts (--gtp, --egtp): GTP keeps its own "
                                    "weight shards");
      std::erase_if(r.layouts, has_gtp);
      o.notes.push_back(gtp_refuser + ": " + r.name + "'s GTP layouts left out (GTP keeps its own weight shards)");
    }
  }
  std::erase_if(rows, [](const CheckRow& r) { return r.layouts.empty(); });
  fit_dtype(o, rows);
  return rows;
}

void finish_options(const CLI::App& check, CheckOptions& o) {
  // Which options were given, read off their declarations (run_option_names, layout_flags): an option added there is
  // known here. --semantics and --quant apply to every row of the default set; any other run option makes a model
  // of its own (custom_model).
  const std::set<std::string> every_row{"--semantics", "--quant"};
  o.custom_semantics = check.count("--semantics") > 0;
  o.custom_quant = check.count("--quant") > 0;
  for (const std::string& flag : run_option_names())
    o.custom_model = o.custom_model || (!every_row.contains(flag) && check.count(flag) > 0);
  o.seq_given = check.count("--seq") > 0;
  o.global_batch_given = check.count("--global-batch") > 0;
  for (const std::string& flag : layout_flags())
    if (check.count(flag) > 0 && o.layout.world == 0)
      throw std::invalid_argument(flag + " needs --world (without it check runs its built-in layouts)");
  finish_layout(check, o.layout);
  if (check.count("--jobs") > 0 && o.backend != Backend::inproc)
    throw std::invalid_argument("--jobs is for in-process ranks; under mpirun the processes run one layout at a time");
  if (on_device(o.kernels)) {
    // One device and its streams serve every run: the device runs go one after another.
    if (check.count("--jobs") > 0 && o.jobs > 1)
      throw std::invalid_argument("--jobs " + std::to_string(o.jobs) + " with --kernels " +
                                  std::string(name_of(o.kernels)) + ": the device runs go one after another");
    o.jobs = 1;
  }
  const Tolerance table = moe::tolerance(Compared::training_step, o.dtype);
  o.tolerance_given = check.count("--atol") > 0 || check.count("--rtol") > 0;
  if (check.count("--atol") == 0) o.atol = table.atol;
  if (check.count("--rtol") == 0) o.rtol = table.rtol;
}

std::vector<std::string> options_reaching_no_row(const CLI::App& check) {
  std::set<std::string> reaching(run_option_names().begin(), run_option_names().end());
  for (const std::string& flag : layout_flags()) reaching.insert(flag);
  reaching.insert("--world");
  reaching.insert(std::begin(kJobOptions), std::end(kJobOptions));
  // Row flags count when they are in the registry, not when they are merely declared beside it.
  CLI::App scratch;
  CheckOptions unused;
  add_row_flags(scratch, unused);
  for (const RowFlag& f : unused.row_flags) reaching.insert(f.option->get_name());
  std::vector<std::string> none;
  for (const CLI::Option* option : check.get_options())
    if (option != check.get_help_ptr() && !reaching.contains(option->get_name())) none.push_back(option->get_name());
  return none;
}

}  // namespace moe::cli
