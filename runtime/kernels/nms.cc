// ONNX NonMaxSuppression's selection (nms.h).
#include "runtime/kernels/nms.h"

#include <algorithm>
#include <numeric>

#include "graph/error.h"

namespace graphrun::runtime {
namespace {

struct Box {
  double y1, x1, y2, x2;
  double area() const { return (y2 - y1) * (x2 - x1); }
};

Box box_at(const std::vector<double>& b, int64_t i, bool center) {
  const double* v = b.data() + 4 * i;
  if (center) return {v[1] - v[3] / 2, v[0] - v[2] / 2, v[1] + v[3] / 2, v[0] + v[2] / 2};
  return {std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]), std::max(v[1], v[3])};
}

bool suppresses(const Box& a, const Box& b, double threshold) {
  const double aa = a.area(), ab = b.area();
  if (aa <= 0 || ab <= 0) return false;
  const double h = std::max(0.0, std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
  const double w = std::max(0.0, std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
  const double inter = h * w;
  return inter / (aa + ab - inter) > threshold;
}

double scalar_of(const Tensor* t, const char* what, double def) {
  if (!t) return def;
  GR_CHECK(t->numel() == 1, "NonMaxSuppression: " << what << " must hold one value, got " << shape_str(t->shape()));
  return t->as_doubles()[0];
}

}  // namespace

std::vector<int64_t> non_max_suppression(const Node& node, const Tensor& boxes, const Tensor& scores,
                                         const Tensor* max_per_class, const Tensor* iou_threshold,
                                         const Tensor* score_threshold) {
  GR_CHECK(boxes.rank() == 3 && boxes.dim(2) == 4, "NonMaxSuppression: boxes must be [batch, boxes, 4], got "
                                                       << shape_str(boxes.shape()));
  GR_CHECK(scores.rank() == 3 && scores.dim(0) == boxes.dim(0) && scores.dim(2) == boxes.dim(1),
           "NonMaxSuppression: scores " << shape_str(scores.shape()) << " do not fit boxes " << shape_str(boxes.shape()));
  const int64_t center = node.attr_i("center_point_box", 0);
  GR_CHECK(center == 0 || center == 1, "NonMaxSuppression: center_point_box must be 0 or 1, got " << center);
  // (As an integer: torchvision's nms asks for INT64_MAX boxes, which a double would round past.)
  int64_t limit = 0;
  if (max_per_class) {
    GR_CHECK(max_per_class->numel() == 1, "NonMaxSuppression: max_output_boxes_per_class must hold one value, got "
                                              << shape_str(max_per_class->shape()));
    limit = max_per_class->as_int64s()[0];
  }
  const double iou = scalar_of(iou_threshold, "iou_threshold", 0);
  GR_CHECK(iou >= 0 && iou <= 1, "NonMaxSuppression: iou_threshold must be in [0, 1], got " << iou);
  const bool has_score = score_threshold != nullptr;
  const double min_score = scalar_of(score_threshold, "score_threshold", 0);
  const int64_t B = boxes.dim(0), N = boxes.dim(1), C = scores.dim(1);
  const std::vector<double> bv = boxes.as_doubles(), sv = scores.as_doubles();
  std::vector<int64_t> out;
  if (limit <= 0) return out;
  std::vector<int64_t> order;
  std::vector<Box> kept;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const double* s = sv.data() + (b * C + c) * N;
      order.clear();
      for (int64_t i = 0; i < N; ++i)
        if (!has_score || s[i] > min_score) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s[x] > s[y]; });
      kept.clear();
      int64_t selected = 0;
      for (int64_t i : order) {
        if (selected >= limit) break;
        const Box bx = box_at(bv, b * N + i, center == 1);
        bool suppressed = false;
        for (const Box& k : kept) suppressed = suppressed || suppresses(k, bx, iou);
        if (suppressed) continue;
        kept.push_back(bx);
        out.insert(out.end(), {b, c, i});
        ++selected;
      }
    }
  return out;
}

}  // namespace graphrun::runtime
