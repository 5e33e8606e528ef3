#!/usr/bin/env bash
# A check that dies partway (exit 2) prints the runs it finished, failures included, on standard output before the
# one-line error on standard error. Before: standard output was empty, and the runs that had already failed showed
# only in stderr's progress lines. The hard error is a real one: a --checkpoint-dir that holds a foreign file is
# refused when the resumed run saves into it, after the three runs filtered in before it (made to fail at
# tolerance 0) have finished. -j1: the runs go in order, so those three always finish first.
#   check_partial_report.sh MOE_ORACLE
set -euo pipefail
oracle=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/checkpoint"
echo "not a checkpoint" >"$dir/checkpoint/foreign"
first="tiny-v4 sum b1 [intended] w4 tp1 cp1 pp1 ep4 etp1"
args=(check -j1 --atol 0 --rtol 0 --filter "$first" --filter "dist-opt clip 0.5 resume" --checkpoint-dir "$dir/checkpoint")
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$dir/out"; echo "--- stderr"; cat "$dir/err"; exit 1; }

rc=0
"$oracle" "${args[@]}" >"$dir/out" 2>"$dir/err" || rc=$?
[[ $rc == 2 ]] || fail "exit $rc, not 2"
[[ $(tail -1 "$dir/err") == "moe-oracle: error: checkpoint: refusing to replace"* ]] || fail "no one-line error last"
grep -qF "FAIL $first dp4 edp1 alltoall: first mismatch in " "$dir/out" || fail "the finished failure is not reported"
[[ $(grep -c "^w4 tp1 cp1 pp1 ep4 etp1 dp4 edp1 .* FAIL$" "$dir/out") == 3 ]] || fail "not the three finished rows"
grep -q "^0 passed, 3 failed$" "$dir/out" || fail "no count of the finished runs"
grep -q "^incomplete: the check stopped with an error after these 3 runs" "$dir/out" || fail "not marked incomplete"
! grep -q "resume" "$dir/out" || fail "the run that stopped the check is reported as if it had finished"
echo "text: ok"

rc=0
"$oracle" "${args[@]}" --json >"$dir/out" 2>"$dir/err" || rc=$?
[[ $rc == 2 ]] || fail "--json: exit $rc, not 2"
python3 - "$dir/out" <<'PY' || fail "--json: not the partial report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["complete"] is False and "refusing to replace" in r["error"], r.get("error")
assert [x["pass"] for x in r["runs"]] == [False, False, False], r["runs"]
assert all("first_mismatch" in x for x in r["runs"])
PY
echo "json: ok"
