#!/usr/bin/env bash
# A report that cannot be written is exit status 2 with one line, "cannot write the report: <where> (<why>)"
# (cli/report_output.hpp), never the verdict over a lost or truncated report (ctest cli.lost_report.*). Each case
# runs one command with its report going to /dev/full, which refuses every write with ENOSPC as a full disk does.
# Before: every one of these exited 0 (or the verdict's 1) with nothing written.
# Usage: lost_report.sh MOE_ORACLE SOURCE_DIR CASE
set -uo pipefail
oracle="$1" source="$2" case="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
one_run=(--world 2 --ep 2 --dispatcher alltoall)  # one small run: the report is what is tested, not the check

case "$case" in
  check) "$oracle" check "${one_run[@]}" >/dev/full 2>"$tmp/err" ;;
  check_json) "$oracle" check "${one_run[@]}" --json >/dev/full 2>"$tmp/err" ;;
  check_junit) "$oracle" check "${one_run[@]}" --junit /dev/full >/dev/null 2>"$tmp/err" ;;
  # A failing check (zero tolerance): the lost report outranks the verdict's 1.
  check_failing) "$oracle" check "${one_run[@]}" --atol 0 --rtol 0 --dtype float >/dev/full 2>"$tmp/err" ;;
  compare) "$oracle" compare "$source/compare/tests/data/megatron_ep2_float32" >/dev/full 2>"$tmp/err" ;;
  quant) "$oracle" quant >/dev/full 2>"$tmp/err" ;;
  quant_json) "$oracle" quant --json >/dev/full 2>"$tmp/err" ;;
  checkpoint_verify)
    "$oracle" check --steps 2 --world 2 --ep 2 --dispatcher flex --resume-as world=2 \
      --checkpoint-dir "$tmp/checkpoint" >/dev/null || { echo "could not write the checkpoint to verify"; exit 1; }
    "$oracle" checkpoint verify "$tmp/checkpoint" >/dev/full 2>"$tmp/err" ;;
  golden_verify) "$oracle" golden verify "$source/golden/cases/z_loss" --json >/dev/full 2>"$tmp/err" ;;
  step_html) "$oracle" step --html /dev/full >/dev/null 2>"$tmp/err" ;;
  # Larger than stdio's buffer: the loss shows at a flush in the middle of the report, not only at the end.
  semantics) "$oracle" semantics >/dev/full 2>"$tmp/err" ;;
  *) echo "unknown case $case"; exit 1 ;;
esac
status=$?
fail=0
if [[ $status -ne 2 ]]; then echo "FAIL: $case exited $status, expected 2"; fail=1; fi
if ! grep -qE '^moe-oracle: error: cannot write the report: .+ \(.+\)$' "$tmp/err"; then
  echo "FAIL: $case did not say 'cannot write the report: <where> (<why>)'"
  fail=1
fi
[[ $fail -eq 0 ]] || { echo "its stderr:"; cat "$tmp/err"; }
exit $fail
