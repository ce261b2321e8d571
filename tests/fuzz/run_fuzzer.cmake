# Runs one libFuzzer harness for a bounded time (ctest fuzz.<name>, tests/fuzz/CMakeLists.txt).
#   cmake -DFUZZER=path -DSEEDS=dir -DWORK=dir -DSECONDS=n [-DSEED=n] [-DDICT=file] -P run_fuzzer.cmake
# SEED is libFuzzer's -seed (0 or absent: a random seed).
# The committed seeds are the second corpus folder: libFuzzer reads them and writes new inputs only
# into the first, WORK/corpus, emptied before each run. A crash, a sanitizer report or a broken
# invariant (the harness aborts) makes libFuzzer exit non-zero and this script fail; the input is
# kept under WORK/artifacts. libFuzzer's output (executions, cov:, ft:) is the test's log.
foreach(var FUZZER SEEDS WORK SECONDS)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_fuzzer.cmake: -D${var}= is required")
  endif()
endforeach()
if(NOT IS_DIRECTORY "${SEEDS}")
  message(FATAL_ERROR "run_fuzzer.cmake: no seed corpus at ${SEEDS}")
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/artifacts")
if(NOT DEFINED SEED OR SEED STREQUAL "")
  set(SEED 0)
endif()
set(options -max_total_time=${SECONDS} -seed=${SEED} -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=${WORK}/artifacts/)
if(DICT)
  list(APPEND options -dict=${DICT})
endif()
string(JOIN " " command_line "${FUZZER}" ${options} "${WORK}/corpus" "${SEEDS}")
message(STATUS "${command_line}")
execute_process(COMMAND "${FUZZER}" ${options} "${WORK}/corpus" "${SEEDS}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  file(GLOB found "${WORK}/artifacts/*")
  message(FATAL_ERROR "fuzzing failed (exit status ${status}); input(s): ${found}\n"
                      "Replay one with: ${FUZZER} <input>")
endif()
