// The Eigen types the Whisper example computes with. Row-major, so that a token (or an
// audio frame) is one contiguous row, as in every layout of the attention library.
#pragma once

#include <Eigen/Core>

#include <polyattn/core/matrix.hpp>

namespace polyattn::whisper {

using polyattn::RowMatrixXf;
using RowVectorXf = Eigen::RowVectorXf;

}  // namespace polyattn::whisper
