// The translation unit that builds the tests' precompiled header (support/precompiled.hpp):
// CMake compiles the header with this target's flags, which the tests reuse.
