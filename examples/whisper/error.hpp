// Exceptions of the Whisper example. Every loader and front-end function reports bad
// input by throwing one of these with a message naming the value and what was expected;
// nothing in examples/whisper/ crashes or reads out of bounds on malformed files.
#pragma once

#include <string>

#include <polyattn/core/error.hpp>

namespace polyattn::whisper {

// Base of everything the example throws for bad input (files, arguments, model contents);
// a polyattn::Error, so one catch handles the library's and the example's errors.
class Error : public polyattn::Error {
 public:
  using polyattn::Error::Error;
};

// A file that cannot be opened or read.
class IoError : public Error {
 public:
  using Error::Error;
};

// A file whose bytes do not follow its format: bad magic, truncation, inconsistent sizes.
class FormatError : public Error {
 public:
  using Error::Error;
};

// A well-formed file (or argument) that asks for something this code does not do:
// e.g. an int8-quantized model, a 12-bit WAV, an unknown tensor type.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// A model whose tensors do not fit together (missing tensor, wrong shape).
class ModelError : public Error {
 public:
  using Error::Error;
};

}  // namespace polyattn::whisper
