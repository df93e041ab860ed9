// ONNX NonMaxSuppression (opsets 10 and 11) on tensors the host can read, shared by the CPU kernel and the CUDA
// kernel (which reads its inputs back: the output's length depends on the values). Per batch and class, the
// boxes whose score is above score_threshold, highest score first (equal scores: the lower index first), each
// kept unless its IoU with a box kept before is above iou_threshold, at most max_output_boxes_per_class of
// them (0 or absent: none). Boxes are corners [y1, x1, y2, x2] in either order (center_point_box 0) or
// [x_center, y_center, width, height] (1); a box of no area suppresses nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun::runtime {

// The selected [batch, class, box] triples, in order. boxes [B, N, 4] and scores [B, C, N] are f32 or f64; the
// three optional scalars are given when present (null otherwise).
std::vector<int64_t> non_max_suppression(const Node& node, const Tensor& boxes, const Tensor& scores,
                                         const Tensor* max_per_class, const Tensor* iou_threshold,
                                         const Tensor* score_threshold);

}  // namespace graphrun::runtime
