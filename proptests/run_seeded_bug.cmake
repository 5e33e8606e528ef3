# Runs one property on a seeded-bug variant and passes only if that property fails — the bug was caught.
#   cmake -DBINARY=<variant> -DPROPERTY=<Suite.Name> -P run_seeded_bug.cmake
# The variant's output (RapidCheck's shrunk counterexample and its RC_PARAMS line) is printed either way.
execute_process(COMMAND ${BINARY} --gtest_filter=${PROPERTY} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
message("${out}")
if(status EQUAL 0)
  message(FATAL_ERROR "seeded bug NOT caught: ${PROPERTY} passed on ${BINARY}")
endif()
string(FIND "${out}" "[  FAILED  ] ${PROPERTY}" failed_at)
string(FIND "${out}" "Falsifiable" falsified_at)
if(failed_at EQUAL -1 OR falsified_at EQUAL -1)
  message(FATAL_ERROR "${BINARY} exited with ${status} but ${PROPERTY} did not fail as a property (crash?)")
endif()
message(STATUS "seeded bug caught by ${PROPERTY}")
