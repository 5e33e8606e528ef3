#!/usr/bin/env bash
# Errors reach the user under MPI (ctest cli.mpi_errors): a layout larger than the job, an invalid layout, a bench
# whose experts do not split over the ranks, each printed with the rank before the job is aborted, exit status 2;
# a mismatch under MPI is exit status 1; ranks started with different options are refused, naming the option and
# the ranks (before: different --steps waited forever, a different --seed or --preset ended as exit 1 "FAIL").
# Usage: mpi_errors.sh MPIEXEC MOE_ORACLE
set -uo pipefail
mpiexec="$1" oracle="$2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail=0
expect() {  # expect STATUS FRAGMENT ARGS...
  local want="$1" fragment="$2"
  shift 2
  local out status
  out="$("$mpiexec" -np 4 --oversubscribe "$oracle" "$@" 2>&1)"
  status=$?
  if [[ $status -ne $want ]]; then echo "FAIL: $* exited $status, expected $want"; echo "$out" | tail -5; fail=1; fi
  if ! grep -qF -- "$fragment" <<<"$out"; then echo "FAIL: $* did not print: $fragment"; echo "$out" | tail -5; fail=1; fi
}
expect 2 "needs 8 ranks; mpirun started 4" check --backend mpi --world 8 --ep 2
expect 2 "invalid parallel layout: world (4) must be divisible by etp·ep·pp (3)" check --backend mpi --world 4 --ep 3
expect 1 "first mismatch" check --backend mpi --world 2 --ep 2 --dispatcher flex --atol 0 --rtol 0
expect 0 "sit it out" check --backend mpi --world 2 --ep 2 --dispatcher flex
# Every rank finds this one itself; which rank's line is printed before Open MPI's abort kills the others is a race
# (on a loaded machine rank 0's was lost), so any rank's will do.
expect 2 "of 4: --experts 6 must divide by the 4 ranks" bench --backend mpi --experts 6 --tokens 8
# Ranks 0-1 run A, ranks 2-3 run B (mpirun's MPMD form); bounded by timeout, so that a hang fails (status 124).
expect_split() {  # expect_split STATUS FRAGMENT "ARGS OF A" "ARGS OF B"
  local want="$1" fragment="$2" out status
  out="$(timeout 60 "$mpiexec" --oversubscribe -np 2 "$oracle" $3 : -np 2 "$oracle" $4 2>&1)"
  status=$?
  if [[ $status -ne $want ]]; then echo "FAIL: $3 : $4 exited $status, expected $want"; echo "$out" | tail -5; fail=1; fi
  if ! grep -qF -- "$fragment" <<<"$out"; then echo "FAIL: $3 : $4 did not print: $fragment"; echo "$out" | tail -5; fail=1; fi
}
run="check --backend mpi --world 4 --ep 2 --dispatcher flex"
expect_split 2 "different options: --steps is 2 on rank 0 but 3 on ranks 2, 3" "$run --steps 2" "$run --steps 3"
expect_split 2 "different options: --seed is 1 on rank 0 but 2 on ranks 2, 3" "$run --seed 1" "$run --seed 2"
expect_split 2 "different options: --preset is tiny-v4 on rank 0 but tiny-v3 on ranks 2, 3" \
  "$run --preset tiny-v4" "$run --preset tiny-v3"
expect_split 2 "different options: --tokens is 8 on rank 0 but 16 on ranks 2, 3" \
  "bench --backend mpi --experts 4 --topk 2 --tokens 8" "bench --backend mpi --experts 4 --topk 2 --tokens 16"
expect_split 0 "pass" "$run" "$run"
# Without mpirun (a singleton): the same line, MPI ended normally (no abort banner, no ORTE_ERROR_LOG).
out="$("$oracle" check --backend mpi --world 2 --ep 2 2>&1)"
status=$?
if [[ $status -ne 2 ]] || ! grep -qF "needs 2 ranks; mpirun started 1" <<<"$out" || grep -q "ORTE\|MPI_ABORT" <<<"$out"; then
  echo "FAIL: singleton check --backend mpi exited $status:"; echo "$out" | tail -5; fail=1
fi
[[ $fail -eq 0 ]] && echo "mpi errors: every message printed with its exit status"
exit $fail
