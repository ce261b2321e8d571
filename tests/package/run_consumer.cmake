# cmake -DMODE=find_package|subdirectory -DSOURCE_DIR=... -DBUILD_DIR=... -DWORK_DIR=... -DGENERATOR=... -P run_consumer.cmake
# Builds and runs a consumer of polyattn the way a downstream project would.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(here ${CMAKE_CURRENT_LIST_DIR})
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} -S ${here}/find_package_consumer -B ${WORK_DIR}/build -G ${GENERATOR}
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
else()
  run(${CMAKE_COMMAND} -S ${here}/subdirectory_consumer -B ${WORK_DIR}/build -G ${GENERATOR}
      -DPOLYATTN_SOURCE_DIR=${SOURCE_DIR} -DPOLYATTN_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Release)
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
