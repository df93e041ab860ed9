// Evaluation: the model's inference form plus the metric graph (graph/passes/add_metrics.h) on the
// first device, the same on every device: correct count and summed cross-entropy accumulated over the
// test batches as executor state, read once at the end.
#include "graph/passes/add_metrics.h"
#include "graph/passes/remove_noops.h"
#include "graph/passes/train_mode.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

// Before any training: the model must map the images to one score per class of the labels.
void Trainer::setup_evaluation() {
  const Graph inference = passes::remove_noops(passes::to_inference(graphs_.forward));
  ExecOptions eo;
  eo.device = opts_.pipeline.devices[0];
  eo.threads = threads_ * static_cast<int>(opts_.pipeline.devices.size());
  eo.seed = opts_.seed;
  {
    ExecOptions co = eo;
    co.fetch = {graphs_.logits};
    Executor check(inference, co);
    const int64_t classes = std::max(train_.num_classes(), test_.num_classes());
    const int64_t n = std::min<int64_t>(2, test_.size());
    Shape s = test_.images.shape();
    s[0] = n;
    Tensor x = Tensor::view(DType::F32, s, test_.images.raw());
    Tensor out;
    try {
      out = check.run({{graphs_.image, x}}).at(graphs_.logits);  // only its shape is read
    } catch (const Error& e) {
      GR_FAIL("model '" << graphs_.forward.name << "' cannot run on the images of '" << opts_.data_dir << "': " << e.what());
    }
    GR_CHECK(out.dtype() == DType::F32 && out.rank() == 2 && out.dim(0) == n,
             "model output '" << graphs_.logits << "' is " << dtype_name(out.dtype()) << shape_str(out.shape())
                              << " for " << n << " images; training needs class scores f32[N,classes]");
    GR_CHECK(out.dim(1) >= classes, "model output '" << graphs_.logits << "' has " << out.dim(1)
                                                     << " classes but the labels in '" << opts_.data_dir
                                                     << "' go up to " << classes - 1 << " (" << classes << " classes)");
  }
  passes::Metrics m;
  const Graph g = passes::add_metrics(inference, graphs_.logits, &m);
  eo.state_updates = m.state_updates;
  for (const auto& [next, _] : m.state_updates) eo.fetch.push_back(next);
  eval_ = std::make_unique<Evaluation>();
  eval_->exec = std::make_unique<Executor>(g, eo);
  eval_->labels = m.labels;
  eval_->correct_total = m.correct_total;
  eval_->loss_total = m.loss_total;
  eval_->totals = std::make_unique<HostReadback>(backend_, eo.device, 1, 2);
}

double Trainer::evaluate() { return evaluate_stats().accuracy; }

EvalStats Trainer::evaluate_stats() {
  ProfileScope scope(eval_->profile, "evaluate", "phase");
  Executor& ex = *eval_->exec;
  for (const auto& [name, _] : ex.graph().initializers)
    if (replica(0).states().count(name)) ex.set_state(name, replica(0).state(name));
  const Tensor zero = Tensor::scalar<float>(0.f);
  ex.set_state(eval_->correct_total, zero);
  ex.set_state(eval_->loss_total, zero);
  EvalStats st;
  const int64_t N = test_.size();
  st.images = N;
  if (!N) return st;
  // Batches are contiguous: views into the test set where the first device reads it.
  DeviceData data = *replicas_.at(0)->data;  // (shares the tensors' memory)
  const int64_t per = test_.images.numel() / N;
  for (int64_t i = 0; i < N; i += opts_.eval_batch) {
    const int64_t n = std::min(opts_.eval_batch, N - i);
    Shape s = test_.images.shape();
    s[0] = n;
    Tensor x = Tensor::view(DType::F32, s, static_cast<float*>(data.test_images.raw()) + i * per,
                            data.test_images.device());
    Tensor y = Tensor::view(DType::I64, {n}, static_cast<int64_t*>(data.test_labels.raw()) + i,
                            data.test_labels.device());
    ex.run({{graphs_.image, x}, {eval_->labels, y}});
  }
  eval_->totals->post(0, {&ex.state(eval_->correct_total), &ex.state(eval_->loss_total)});
  const float* totals = eval_->totals->read(0);
  st.accuracy = double(totals[0]) / N;
  st.loss = double(totals[1]) / N;
  return st;
}

}  // namespace graphrun::runtime
