// The teaching stepper: the seed's 4-token EP2 numbers come out of the dispatcher, the stepped layer equals the
// oracle, and every row's provenance label is consistent with where the row is.
#include "cli/step/stage_catalogue.hpp"
#include "cli/step/stage_recorder.hpp"
#include "cli/step/stepper.hpp"
#include "distributed/dispatch/dispatcher.hpp"
#include "reference/moe_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe::step {
namespace {

using dist::DispatcherKind;
const std::vector<DispatcherKind> kAll = all_values<DispatcherKind>();

const Stage& stage(const Trace& t, const std::string& id) {
  for (const Stage& s : t.stages)
    if (s.id == id) return s;
  throw std::runtime_error("no stage " + id);
}

std::vector<std::string> labels(const RankStage& s) {
  std::vector<std::string> out;
  for (const TraceRow& r : s.rows) out.push_back(r.label);
  return out;
}

// Seed 000: rank 0 sends [2,2], rank 1 sends [1,3]; output_splits [2,1] and [2,3]; they receive 3 and 5 rows.
TEST(StepSeedExample, SplitsAreTheSeeds) {
  const Trace t = run_step(seed_example(7, DispatcherKind::alltoall), DispatcherKind::alltoall);
  const Stage& in = stage(t, "dispatch.input_splits");
  const Stage& out = stage(t, "dispatch.output_splits");
  EXPECT_EQ(in.ranks[0].counts, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(in.ranks[1].counts, (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(out.ranks[0].counts, (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(out.ranks[1].counts, (std::vector<std::int64_t>{2, 3}));
  const Stage& received = stage(t, "dispatch.ep_alltoallv");
  EXPECT_EQ(received.ranks[0].rows.size(), 3u);
  EXPECT_EQ(received.ranks[1].rows.size(), 5u);
  // Source-major, expert-major within a source: what the chunk sort then reorders.
  EXPECT_EQ(labels(received.ranks[1]),
            (std::vector<std::string>{"a@r0→e2", "b@r0→e3", "d@r1→e2", "c@r1→e3", "d@r1→e3"}));
  EXPECT_EQ(labels(stage(t, "dispatch.expert_rows").ranks[1]),
            (std::vector<std::string>{"a@r0→e2", "d@r1→e2", "b@r0→e3", "c@r1→e3", "d@r1→e3"}));
  // "a 的原位置累加 expert 0 与 2 的加权结果".
  EXPECT_EQ(stage(t, "combine.output").ranks[0].rows[0].label, "a@r0→e0+e2");
}

// The other dispatchers' own expectations, as seed_example's notes state them for each.
TEST(StepSeedExample, AllGatherKeepsEachRanksExpertRows) {
  const Trace t = run_step(seed_example(7, DispatcherKind::allgather), DispatcherKind::allgather);
  for (const RankStage& rs : stage(t, "dispatch.peer_tokens").ranks)
    EXPECT_EQ(rs.counts, (std::vector<std::int64_t>{2, 2}));
  const Stage& rows = stage(t, "dispatch.expert_rows");
  EXPECT_EQ(labels(rows.ranks[0]), (std::vector<std::string>{"a@r0→e0", "b@r0→e1", "c@r1→e1"}));
  EXPECT_EQ(rows.ranks[1].rows.size(), 5u);
  EXPECT_NE(t.notes[2].find("peer_tokens [2,2]"), std::string::npos) << t.notes[2];
}

TEST(StepSeedExample, FlexSendsATokenOncePerDestination) {
  const Trace t = run_step(seed_example(7, DispatcherKind::flex), DispatcherKind::flex);
  const Stage& send = stage(t, "dispatch.send_counts");
  EXPECT_EQ(send.ranks[0].counts, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(send.ranks[1].counts, (std::vector<std::int64_t>{1, 2}));
  const Stage& received = stage(t, "dispatch.alltoallv");
  EXPECT_EQ(received.ranks[0].rows.size(), 3u);
  EXPECT_EQ(received.ranks[1].rows.size(), 4u);
  EXPECT_EQ(stage(t, "dispatch.expert_rows").ranks[1].rows.size(), 5u);
  EXPECT_NE(t.notes[2].find("rank 1 sends [1,2]"), std::string::npos) << t.notes[2];
}

// The stepped forward output is the oracle's moe_forward output on the same batch, for every dispatcher.
TEST(StepSeedExample, ForwardEqualsTheOracle) {
  const StepProblem p = seed_example(7, DispatcherKind::alltoall);
  MoeInputs<double> in;
  in.seq = p.tokens();
  in.batch = 1;
  in.x = p.x;
  in.input_ids = p.input_ids.transpose();
  const Matrix<double> want = moe_forward(p.config, p.params, in).y;
  ASSERT_GT(want.cwiseAbs().maxCoeff(), 1e-3);  // a zero output would match anything
  for (auto kind : kAll) {
    const Trace t = run_step(p, kind);
    ASSERT_EQ(t.y.size(), static_cast<size_t>(want.rows()));
    for (Eigen::Index r = 0; r < want.rows(); ++r)
      for (Eigen::Index c = 0; c < want.cols(); ++c)
        EXPECT_NEAR(t.y[size_t(r)][size_t(c)], want(r, c), 1e-12) << to_string(kind) << " token " << r;
    EXPECT_TRUE(t.oracle.pass()) << to_string(kind) << ": " << t.oracle.max_abs_y << " " << t.oracle.max_abs_grad_x;
  }
}

// On a layout with ETP and a real router: every expert row sits on a rank holding its expert, every received
// row's data is its token's input row, and the output still equals the oracle.
TEST(StepPreset, ProvenanceMatchesTheData) {
  const StepProblem p = preset_example(layer_preset("tiny-v4"), 4, 2, 2, 3, 11);
  for (auto kind : kAll) {
    const Trace t = run_step(p, kind);
    EXPECT_TRUE(t.oracle.pass()) << to_string(kind);
    for (const Stage& s : t.stages) {
      if (s.kind != StageKind::rows) continue;
      for (const RankStage& rs : s.ranks) {
        const auto& held = t.rank_experts[size_t(rs.rank)];
        for (const TraceRow& row : rs.rows) {
          if (s.name == "expert_rows" || s.phase.rfind("experts", 0) == 0) {
            for (int e : row.experts) {
              EXPECT_NE(std::find(held.begin(), held.end(), e), held.end()) << s.id << " rank " << rs.rank << " " << row.label;
            }
          }
          if (s.phase == "dispatch" && row.tokens.size() == 1 && row.assignments.empty()) {
            for (size_t c = 0; c < row.values.size(); ++c) {
              ASSERT_EQ(row.values[c], p.x(row.tokens[0], Eigen::Index(c))) << s.id << " " << row.label;
            }
          }
        }
      }
    }
  }
}

// Each token's k results meet in its output row, whatever the dispatcher.
TEST(StepPreset, OutputRowsSumTheirTopK) {
  const StepProblem p = preset_example(layer_preset("tiny-v3"), 4, 4, 1, 2, 3);
  for (auto kind : kAll) {
    const Trace t = run_step(p, kind);
    for (const RankStage& rs : stage(t, "combine.output").ranks)
      for (const TraceRow& row : rs.rows) {
        EXPECT_EQ(row.tokens.size(), 1u) << row.label;
        EXPECT_EQ(row.assignments.size(), size_t(p.config.topk)) << to_string(kind) << " " << row.label;
      }
  }
}

// Rows first, then their probabilities under the same name: the recorder pairs them, even when other stages
// were reported in between (the AlltoAll backward sends the rows, then the probabilities, through the same path).
TEST(StepRecorder, PairsProbabilitiesWithTheirRows) {
  StageRecorder rec;
  rec.begin_phase("dispatch_backward");
  rec.rows("unsort_chunks", Matrix<double>::Zero(3, 4));
  rec.rows("ep_alltoallv_back", Matrix<double>::Zero(2, 4));
  rec.rows("unsort_chunks", Matrix<double>::Zero(3, 1));
  rec.rows("ep_alltoallv_back", Matrix<double>::Zero(2, 1));
  ASSERT_EQ(rec.records().size(), 2u);
  EXPECT_EQ(rec.records()[0].buffers.size(), 2u);
  EXPECT_EQ(rec.records()[1].buffers[1].cols(), 1);
  rec.begin_phase("combine");
  rec.rows("unsort_chunks", Matrix<double>::Zero(3, 4));  // another phase: a new stage
  EXPECT_EQ(rec.records().size(), 3u);
}

TEST(StepCatalogue, UnknownStageIsAnError) {
  EXPECT_THROW(catalogue_stage(DispatcherKind::alltoall, "dispatch", "teleport", false), std::logic_error);
  EXPECT_THROW(catalogue_stage(DispatcherKind::flex, "dispatch", "ep_alltoallv", false), std::logic_error);
  EXPECT_EQ(catalogue_stage(DispatcherKind::flex, "dispatch", "alltoallv", false).transfer, true);
}

}  // namespace
}  // namespace moe::step
