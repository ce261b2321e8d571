# The include rule of the library's layout (README, "Layout"): a file in include/polyattn/variants/
# describes a variant (what is cached per token, how scores and outputs are formed) and includes
# only polyattn/core/, other files of polyattn/variants/, Eigen and standard headers: no cache
# store, executor, conversion, layer module, attention.hpp, and no third-party header (xsimd).
# The rule is the one a reader checks with grep:
#   grep -rn '#include' include/polyattn/variants/
#
#   cmake -DPOLYATTN_INCLUDE_DIR=<repo>/include -P tests/check_variant_includes.cmake
# Fails naming every offending file and line.
if(NOT POLYATTN_INCLUDE_DIR)
  message(FATAL_ERROR "check_variant_includes: pass -DPOLYATTN_INCLUDE_DIR=<repository>/include")
endif()
set(variants_dir "${POLYATTN_INCLUDE_DIR}/polyattn/variants")
file(GLOB_RECURSE files LIST_DIRECTORIES false "${variants_dir}/*")
list(SORT files)
if(NOT files)
  message(FATAL_ERROR "check_variant_includes: no files under ${variants_dir}")
endif()

set(violations "")
set(checked 0)
foreach(path IN LISTS files)
  file(READ "${path}" content)
  # One list entry per line, numbered from 1: ';' and the brackets (which would stop CMake's
  # list splitting) are masked first; empty lines stay entries.
  string(REPLACE ";" "<semicolon>" content "${content}")
  string(REPLACE "[" "<lbracket>" content "${content}")
  string(REPLACE "]" "<rbracket>" content "${content}")
  string(REPLACE "\n" ";" lines "${content}")
  file(RELATIVE_PATH shown "${POLYATTN_INCLUDE_DIR}/.." "${path}")
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include")
      continue()
    endif()
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]")
      set(header "${CMAKE_MATCH_1}")
      math(EXPR checked "${checked} + 1")
      if(header MATCHES "^polyattn/(core|variants)/[^/]+$")
        continue()  # the library's own core and variants
      elseif(header MATCHES "^Eigen/[A-Za-z]+$")
        continue()  # Eigen's modules
      elseif(header MATCHES "^[a-z_]+$")
        continue()  # a standard header (<cmath>, <vector>): no directory, no extension
      endif()
    else()
      set(header "(an include that is not a plain <...> or \"...\" path)")
    endif()
    string(REPLACE "<semicolon>" ";" line "${line}")
    string(REPLACE "<lbracket>" "[" line "${line}")
    string(REPLACE "<rbracket>" "]" line "${line}")
    string(STRIP "${line}" line)
    string(APPEND violations "  ${shown}:${number}: ${line}\n")
  endforeach()
endforeach()

list(LENGTH files n_files)
if(violations)
  message(FATAL_ERROR
          "include rule broken: a file in include/polyattn/variants/ may include only polyattn/core/, "
          "polyattn/variants/, Eigen/ and standard headers (no cache/, exec/, convert/, layers/, "
          "attention.hpp, dispatch.hpp, xsimd, ...). Offending lines:\n${violations}")
endif()
message(STATUS "include rule holds: ${checked} includes in ${n_files} files of include/polyattn/variants/")
