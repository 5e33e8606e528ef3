# Runs properties on a seeded-bug variant and passes only if every one of them fails — the bug was caught.
#   cmake -DBINARY=<variant> -DPROPERTIES=<Suite.Name>[:<Suite.Name>…] -P run_seeded_bug.cmake
# The variant's output (RapidCheck's shrunk counterexample and its RC_PARAMS line) is printed either way.
execute_process(COMMAND ${BINARY} --gtest_filter=${PROPERTIES} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
message("${out}")
if(status EQUAL 0)
  message(FATAL_ERROR "seeded bug NOT caught: ${PROPERTIES} passed on ${BINARY}")
endif()
string(REPLACE ":" ";" properties "${PROPERTIES}")
foreach(property IN LISTS properties)
  string(FIND "${out}" "[  FAILED  ] ${property} (" failed_at)
  if(failed_at EQUAL -1)
    message(FATAL_ERROR "seeded bug NOT caught by ${property} on ${BINARY}")
  endif()
endforeach()
string(FIND "${out}" "Falsifiable" falsified_at)
if(falsified_at EQUAL -1)
  message(FATAL_ERROR "${BINARY} failed, but not with a falsified property (a crash?)")
endif()
message(STATUS "seeded bug caught by ${PROPERTIES}")
