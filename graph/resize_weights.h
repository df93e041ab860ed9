// Resize along one axis as a matrix: output i = sum over j of W[i][j] * input j, with ONNX's Resize (opset 19)
// definition of every mode, coordinate transformation, nearest rounding, cubic coefficient, exclude_outside and
// antialias (the filter widened by 1/scale when downsampling). Resize is separable, so an N-D resize is one such
// matrix per resized axis. graph/opset_lowering.cc writes the Resize forms opset 17 cannot say (antialias,
// keep_aspect_ratio_policy, half_pixel_symmetric) as MatMuls by these matrices, for inputs of sizes known when
// loading.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace graphrun {

struct ResizeAxis {
  int64_t in = 0, out = 0;       // sizes along the axis
  double scale = 1;              // the scale the coordinates use (out / in unless given or kept to an aspect ratio)
  std::string mode = "nearest";  // nearest, linear or cubic
  std::string coordinate_transformation_mode = "half_pixel";  // not tf_crop_and_resize
  std::string nearest_mode = "round_prefer_floor";
  double cubic_coeff_a = -0.75;
  bool exclude_outside = false, antialias = false;
};

// The [out, in] matrix, row-major. Throws (an Error naming the value) for a mode or coordinate transformation it
// does not know.
std::vector<double> resize_axis_weights(const ResizeAxis& a);

}  // namespace graphrun
