#!/usr/bin/env bash
# Errors reach the user under MPI (ctest cli.mpi_errors): a layout larger than the job, an invalid layout, a bench
# whose experts do not split over the ranks, each printed with the rank before the job is aborted, exit status 2;
# a mismatch under MPI is exit status 1.
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
expect 2 "error on rank 0 of 4: --experts 6 must divide by the 4 ranks" bench --backend mpi --experts 6 --tokens 8
# Without mpirun (a singleton): the same line, MPI ended normally (no abort banner, no ORTE_ERROR_LOG).
out="$("$oracle" check --backend mpi --world 2 --ep 2 2>&1)"
status=$?
if [[ $status -ne 2 ]] || ! grep -qF "needs 2 ranks; mpirun started 1" <<<"$out" || grep -q "ORTE\|MPI_ABORT" <<<"$out"; then
  echo "FAIL: singleton check --backend mpi exited $status:"; echo "$out" | tail -5; fail=1
fi
[[ $fail -eq 0 ]] && echo "mpi errors: every message printed with its exit status"
exit $fail
