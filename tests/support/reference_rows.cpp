// The Reference executor's row loops that support/reference_rows.hpp declares, compiled once for
// all the tests, at -O3 in every build (tests/CMakeLists.txt). The sanitizers still instrument them.
#include "support/reference_rows.hpp"

POLYATTN_TEST_REFERENCE_ROW_TYPES(POLYATTN_TEST_REFERENCE_ROWS, )
