// Evaluation: the model's inference form plus the metric graph (graph/passes/add_metrics.h), one copy
// per local device: correct count and summed cross-entropy accumulated over the test batches as
// executor state, read once at the end. Every replica of the job (all ranks') evaluates its own
// contiguous share of the test set, the local ones at once (the replicas' threads are idle then); the
// host adds the totals in replica order, with top-5 hits (more than 10 classes) and, with --loss mse,
// the squared errors; with --loss output, the model's own loss output, each batch's mean times its examples.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "graph/passes/add_metrics.h"
#include "graph/passes/remove_noops.h"
#include "graph/passes/train_mode.h"
#include "runtime/comm/mpi.h"
#include "runtime/pipeline.h"
#include "runtime/plan.h"
#include "runtime/run_at_once.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

namespace {

// Examples whose label is among the 5 highest of their scores (fewer than 5 classes score above it).
int64_t top5_count(const Tensor& scores, const Tensor& labels) {
  const int64_t n = scores.dim(0), c = scores.dim(1);
  const float* p = scores.data<float>();
  const int64_t* y = labels.data<int64_t>();
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = p + i * c;
    const float mine = row[y[i]];
    int64_t above = 0;
    for (int64_t k = 0; k < c; ++k) above += row[k] > mine;
    hits += above < 5;
  }
  return hits;
}

// `n` examples from `first` of `src`'s array `name`, into `buf` (grown to hold them): a view of them.
Tensor read_rows(const data::Source& src, const std::string& name, int64_t first, int64_t n, Tensor& buf) {
  const data::ArraySpec& a = src.spec(name);
  Shape s{n};
  s.insert(s.end(), a.shape.begin(), a.shape.end());
  if (!buf.defined() || buf.numel() < shape_numel(s)) buf = Tensor(a.dtype, s);
  Tensor v = Tensor::view(a.dtype, s, buf.raw());
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = first + i;
  src.read(idx.data(), n, {{name, &v}});
  return v;
}

// `n` examples from `first` of every array of `names`, each into its buffer of `bufs`.
std::map<std::string, Tensor> read_inputs(const data::Source& src, const std::vector<std::string>& names, int64_t first,
                                          int64_t n, std::map<std::string, Tensor>& bufs) {
  std::map<std::string, Tensor> in;
  for (const auto& name : names) in[name] = read_rows(src, name, first, n, bufs[name]);
  return in;
}

// The graph as train's replicas run theirs: constants folded, Relus fused into their producers.
Graph for_executor(Graph g) {
  passes::Pipeline p;
  for (const passes::Pass& pass : executor_passes()) p.add(pass);
  return p.run(g);
}

}  // namespace

// Before any training: the model must map the inputs to one score per class of the labels (or, with
// --loss mse, to one value per target; with --loss output, to a float loss).
void Trainer::setup_evaluation() {
  const Graph inference = passes::remove_noops(passes::to_inference(graphs_.forward));
  ExecOptions eo;
  eo.device = opts_.pipeline.devices[0];
  eo.threads = threads_;
  eo.seed = opts_.seed;
  eval_ = std::make_unique<Evaluation>();
  {
    ExecOptions co = eo;
    co.fetch = {graphs_.logits};
    Executor check(inference, co);
    const int64_t n = std::min<int64_t>(2, test_src_->size());
    std::map<std::string, Tensor> bufs;
    Tensor out;
    // The first test examples (an error reading them names their file itself), then the model on them.
    const std::map<std::string, Tensor> first = read_inputs(*test_src_, graphs_.inputs, 0, n, bufs);
    try {
      out = check.run(first).at(graphs_.logits);  // only its shape is read
    } catch (const Error& e) {
      GR_FAIL("model '" << graphs_.forward.name << "' cannot run on the " << (train_.size() ? "images" : "data")
                        << " of " << test_src_->describe() << ": " << e.what());
    }
    if (own_loss()) {
      GR_CHECK((out.dtype() == DType::F32 || out.dtype() == DType::F64) && out.numel() >= 1,
               "--loss output trains on the model's own loss, but output '"
                   << graphs_.logits << "' is " << dtype_name(out.dtype()) << shape_str(out.shape()) << " for " << n
                   << " examples: a float scalar (or per-example losses, averaged) is a loss");
    } else if (mse()) {
      const data::ArraySpec& t = test_src_->spec(data::kLabels);
      GR_CHECK((out.dtype() == DType::F32 || out.dtype() == DType::F64) && out.rank() >= 1 && out.dim(0) == n && out.numel() == n * t.numel(),
               "model output '" << graphs_.logits << "' is " << dtype_name(out.dtype()) << shape_str(out.shape())
                                << " for " << n << " examples but the targets of " << test_src_->describe() << " are "
                                << dtype_name(t.dtype) << shape_str(t.shape) << " per example");
    } else {
      const int64_t classes = std::max(data::num_classes(*train_src_), data::num_classes(*test_src_));
      // The scores: [N, classes] for one label per example, else [N, classes, d..] or [N, d.., classes]
      // around the labels' per-example shape (load_data chose which).
      const Shape& per = test_src_->spec(data::kLabels).shape;
      Shape want{n};
      want.insert(want.end(), per.begin(), per.end());
      Shape got = out.shape();
      const int axis = opts_.pipeline.classes_last ? static_cast<int>(got.size()) - 1 : 1;
      const int64_t c = out.rank() >= 2 ? got[axis] : 0;
      if (out.rank() >= 2) got.erase(got.begin() + axis);
      GR_CHECK((out.dtype() == DType::F32 || out.dtype() == DType::F64) && out.rank() >= 2 && got == want,
               "model output '" << graphs_.logits << "' is " << dtype_name(out.dtype()) << shape_str(out.shape())
                                << " for " << n << " examples; training needs class scores "
                                << (per.empty() ? "f32[N,classes]" : opts_.pipeline.classes_last ? "f32[N,...,classes]" : "f32[N,classes,...]")
                                << " for labels " << shape_str(want));
      GR_CHECK(c >= classes, "model output '" << graphs_.logits << "' has " << c
                                                       << " classes but the labels in '" << opts_.data_dir
                                                       << "' go up to " << classes - 1 << " (" << classes << " classes)");
      eval_->classes = per.empty() ? c : 0;  // (top-5 is for one label per example)
    }
  }
  // --loss mse: the host sums the squared errors from the outputs; --loss output, the outputs; else the metric
  // graph counts.
  Graph g;
  if (!counts()) {
    g = inference;
    eo.fetch = {graphs_.logits};
  } else {
    passes::Metrics m;
    g = passes::add_metrics(inference, graphs_.logits, &m, opts_.pipeline.classes_last);
    eo.state_updates = m.state_updates;
    for (const auto& [next, _] : m.state_updates) eo.fetch.push_back(next);
    if (eval_->classes > 10) eo.fetch.push_back(graphs_.logits);
    eval_->labels = m.labels;
    eval_->correct_total = m.correct_total;
    eval_->loss_total = m.loss_total;
  }
  eval_->graph = for_executor(g);
  eval_->options = eo;
}

// The tensor evaluation part d reads for state `name` in place, or nullptr where it keeps a copy of
// replica 0's. Evaluation reads replica 0's parameters and statistics: where the part's memory holds them
// (the host; replica 0's GPU), those tensors themselves; on another GPU, its own replica's copy of a
// trained parameter, which is replica 0's bit for bit (every replica applies the same summed gradient
// by the same elementwise update), and copies of the rest (BatchNorm's running statistics, which each
// replica keeps from its own shards until the epoch's end; frozen weights).
const Tensor* Trainer::evaluation_source(int d, const std::string& name) {
  auto it = replica(0).states().find(name);
  if (it == replica(0).states().end()) return nullptr;
  const Device dev = opts_.pipeline.devices[d];
  if (shares_memory(it->second.device(), dev)) return &it->second;
  if (std::find(graphs_.params.begin(), graphs_.params.end(), name) == graphs_.params.end()) return nullptr;
  const Tensor& own = replica(d).state(name);
  return shares_memory(own.device(), dev) ? &own : nullptr;
}

// One copy of the metric graph per device of the run, once the replicas hold their tensors: each reads
// the tensors evaluation_source names (no copy of the model of its own, not even for a moment) and
// copies the rest from the model as loaded.
void Trainer::setup_evaluation_parts() {
  const std::vector<Device>& devs = opts_.pipeline.devices;
  eval_->parts.resize(devs.size());
  for (size_t d = 0; d < devs.size(); ++d) {
    ExecOptions eo = eval_->options;
    eo.device = devs[d];  // with its replica's intra-op threads: the copies run at once
    // --profile of an --eval-only run: the evaluation is all it runs, so its kernels are what the trace
    // and the table show (a training run's evaluation stays one span, out of the steps' table).
    if (opts_.profiler && opts_.test_only)
      eval_->parts[d].profile = eo.profile =
          &opts_.profiler->track("evaluation " + std::to_string(d) + " (" + devs[d].str() + ")");
    Graph g = eval_->graph;
    for (auto& [name, t] : g.initializers) {
      const Tensor* src = evaluation_source(static_cast<int>(d), name);
      if (src && src->dtype() == t.dtype() && src->shape() == t.shape()) t = *src;
    }
    eval_->parts[d].exec = std::make_unique<Executor>(std::move(g), eo);
    if (counts()) eval_->parts[d].totals = std::make_unique<HostReadback>(backend_, devs[d], 1, 2);
  }
  eval_->graph = Graph();
}

// Every evaluation takes the replicas' tensors afresh (a state update that is not in place swaps a
// state's buffer every step) and copies replica 0's where it keeps copies. The replicas are idle while it
// runs and it changes none of their tensors; on a GPU its kernels follow theirs on the device's stream.
void Trainer::share_evaluation_state() {
  for (size_t d = 0; d < eval_->parts.size(); ++d) {
    Executor& ex = *eval_->parts[d].exec;
    for (const auto& [name, _] : ex.graph().initializers) {
      if (!replica(0).states().count(name)) continue;
      if (const Tensor* src = evaluation_source(static_cast<int>(d), name)) ex.share_state(name, *src);
      else ex.set_state(name, replica(0).state(name));
    }
  }
}

double Trainer::evaluate() { return evaluate_stats().accuracy; }

namespace {

// The smallest of the ranks' evaluation batches, where ranks = true (MPI): each rank sizes its own from its
// own devices' memory, and the batch decides how the test loss's float sums are grouped, so ranks that agree
// on it report the figures one process with all the replicas would.
int64_t agreed_batch(int64_t mine, bool ranks) {
  if (!ranks) return mine;
  int64_t least = mine;
  for (const std::string& theirs : mpi::allgather(std::to_string(mine), "evaluation batch"))
    least = std::min(least, std::max<int64_t>(1, std::atoll(theirs.c_str())));
  return least;
}

}  // namespace

// The evaluation's batch (TrainerOptions::eval_batch), and its memory limit (GPUs: below). Each part runs
// beside its replica, which keeps its arenas between steps: the part gets what they leave of the
// replica's share of the activation budget (check_memory). Per example, an inference run needs less
// than a training step, which keeps every forward activation for the backward pass, and the gradients:
// the replica's arenas per example of its shard bound it, and the batch shrinks to what that bound
// fits, so that the first evaluation, after a whole epoch, does not run the machine out of memory.
int64_t Trainer::evaluation_batch() {
  int64_t batch = std::max<int64_t>(1, opts_.eval_batch);
  if (!opts_.pipeline.devices.empty() && !opts_.pipeline.devices[0].is_cpu()) return device_evaluation_batch(batch);
  if (!activation_budget_) return batch;
  size_t held = 0;
  for (const auto& r : replicas_) held = std::max(held, r->exec->held_bytes());
  const size_t left = activation_budget_ > held ? activation_budget_ - held : 0;
  const int64_t shard = data::shard(opts_.batch_size, total_replicas_).size[0];
  if (held && shard > 0) {
    const size_t per_example = (held + static_cast<size_t>(shard) - 1) / static_cast<size_t>(shard);
    const int64_t fits = std::max<int64_t>(1, static_cast<int64_t>(left / per_example));
    if (fits < batch) {
      batch = fits;
      if (opts_.log && speaks())
        *opts_.log << "evaluating in batches of " << batch << ", not " << opts_.eval_batch << ": the memory the "
                   << (replicas_.size() > 1 ? "training replicas leave (each holds " : "training replica leaves (it holds ")
                   << bytes_str(held) << " for its activations)" << std::endl;
    }
  }
  std::ostringstream hint;
  hint << "evaluation in batches of " << batch << " beside the training replicas' activations (" << bytes_str(held)
       << " each); lower --batch-size";
  for (auto& part : eval_->parts) part.exec->set_memory_limit(std::max<size_t>(left, 1), hint.str());
  return batch;
}

// On GPUs the evaluation's own count sizes its batch: each device's parts get what it has free when the
// first evaluation starts (beside the replicas' arenas and tensors; a caching allocator's cached blocks
// count, since it gives them back when it must), shared by the parts that run there at once, and less a
// quarter for what the count leaves out (scratch and library workspaces, the allocator's rounding). The
// batch is the largest whose values, counted from their shapes with the test batch's inputs, fit there
// (Executor::most_that_fits): the training arena per example does not bound an inference run's need on
// a device, where every value is allocated as the run goes. That room is each part's memory limit too,
// so a batch of 1 that cannot fit stops before any kernel, in one line. Where it would not hold two
// plans (the batches' and the share's last, smaller batch's), a part keeps one at a time.
int64_t Trainer::device_evaluation_batch(int64_t batch) {
  const std::vector<Device>& devs = opts_.pipeline.devices;
  const Executor& ex = *eval_->parts.at(0).exec;
  std::map<std::string, Shape> shapes;
  size_t input_bytes = 0;  // per example: a batch read from the host is copied to the device
  for (const auto& name : ex.graph().inputs) {
    const data::ArraySpec& a = test_src_->spec(name == eval_->labels ? std::string(data::kLabels) : name);
    Shape s{batch};
    s.insert(s.end(), a.shape.begin(), a.shape.end());
    shapes[name] = s;
    input_bytes += a.bytes();
  }
  std::map<int, int> sharing;  // device index -> parts there
  for (const Device& d : devs) ++sharing[d.index];
  int64_t fits = batch;
  bool tight = false;
  std::string where;
  size_t room_there = 0;
  std::map<int, size_t> room;
  for (const auto& [index, n] : sharing) {
    const Device dev{devs[0].kind, index};
    const size_t free = backend_->free_memory(dev);
    if (!free) continue;
    room[index] = free / static_cast<size_t>(n) / 4 * 3;
    const int64_t most = ex.most_that_fits(shapes, room[index], input_bytes);
    if (most < 0) continue;  // (no batch symbol: nothing to size)
    // The last batch of a share is a shape of its own: where two plans would not fit, one at a time.
    if (ex.most_that_fits(shapes, room[index] / 2, input_bytes) < batch) tight = true;
    if (most < fits) {
      fits = std::max<int64_t>(1, most);
      where = dev.str();
      room_there = room[index];
    }
  }
  if (fits < batch && opts_.log && speaks())
    *opts_.log << "evaluating in batches of " << fits << ", not " << batch << ": the memory " << where
               << " has left beside the training (" << bytes_str(room_there) << " for each evaluation there)"
               << std::endl;
  for (size_t p = 0; p < eval_->parts.size(); ++p)
    if (auto r = room.find(devs[p].index); r != room.end()) {
      std::ostringstream hint;
      hint << "evaluation in batches of " << fits << " on " << devs[p].str() << " beside the training replicas ("
           << bytes_str(r->second) << " for it there); lower --batch-size";
      eval_->parts[p].exec->set_memory_limit(std::max<size_t>(r->second, 1), hint.str());
      if (tight) eval_->parts[p].exec->set_max_plans(1);
    }
  return fits;
}

// What one replica's copy found over its share of the test set.
struct PartTotals {
  double correct = 0, loss = 0, sq = 0;
  int64_t top5 = 0;
};

EvalStats Trainer::evaluate_stats() {
  // (One span on the main thread's track; an --eval-only run's parts have their own, below.)
  ProfileScope scope(opts_.test_only ? nullptr : eval_->profile, "evaluate", "phase");
  EvalStats st;
  const int64_t N = test_src_->size();
  st.images = N;
  const int P = static_cast<int>(eval_->parts.size());
  const int64_t G = total_replicas_;
  if (!eval_->batch) {
    const int64_t own = evaluation_batch();
    eval_->batch = agreed_batch(own, G > P);
    if (eval_->batch < own && opts_.log && speaks())
      *opts_.log << "evaluating in batches of " << eval_->batch << ", not " << own
                 << ": the smallest batch the ranks' memory allows (every rank evaluates in the same batches)"
                 << std::endl;
  }
  const int64_t batch = eval_->batch;
  const Tensor zero = Tensor::scalar<float>(0.f);
  share_evaluation_state();
  for (auto& part : eval_->parts) {
    Executor& ex = *part.exec;
    if (counts()) {
      ex.set_state(eval_->correct_total, zero);
      ex.set_state(eval_->loss_total, zero);
    }
  }
  if (!N) return st;

  // Replica g of the job's G evaluates examples [N g / G, N (g + 1) / G) in batches: the same shares,
  // and so the same figures, however the replicas are spread over ranks.
  std::mutex shrink_mu;
  int64_t shrunk = batch;
  bool said = false;
  auto run_part = [&](int p, PartTotals& tot) {
    Executor& ex = *eval_->parts[p].exec;
    const int64_t g = first_replica_ + p, first = N * g / G, end = N * (g + 1) / G;
    if (first == end) return;
    ProfileScope span(eval_->parts[p].profile, "evaluate", "phase");
    // Batches are contiguous: views into the test set where the device keeps it resident, else read
    // from the source on the host.
    DeviceData data = *replicas_.at(p)->data;  // (shares the tensors' memory)
    const int64_t per = data.resident ? test_.images.numel() / N : 0;
    std::map<std::string, Tensor> xbufs;
    Tensor ybuf;
    // Examples [i, i + n) of the test set, into the part's totals.
    auto run_batch = [&](int64_t i, int64_t n) {
      std::map<std::string, Tensor> in;
      Tensor y;
      if (data.resident) {
        Shape s = test_.images.shape();
        s[0] = n;
        in[graphs_.image] = Tensor::view(DType::F32, s, static_cast<float*>(data.test_images.raw()) + i * per,
                                         data.test_images.device());
        y = Tensor::view(DType::I64, {n}, static_cast<int64_t*>(data.test_labels.raw()) + i, data.test_labels.device());
      } else {
        in = read_inputs(*test_src_, graphs_.inputs, i, n, xbufs);
        if (!own_loss()) y = read_rows(*test_src_, data::kLabels, i, n, ybuf);
      }
      if (own_loss()) {
        // The batch's loss, the mean of the output as training takes it, counted once per example.
        const Tensor out = to_host(ex.run(in).at(graphs_.logits));
        double sum = 0;
        if (out.dtype() == DType::F64)
          for (int64_t j = 0, m = out.numel(); j < m; ++j) sum += out.data<double>()[j];
        else
          for (int64_t j = 0, m = out.numel(); j < m; ++j) sum += out.data<float>()[j];
        tot.loss += sum / double(out.numel()) * double(n);
        return;
      }
      if (mse()) {
        const Tensor out = to_host(ex.run(in).at(graphs_.logits));
        // f32, or f64 outputs and targets (a float64 model): each difference in that type.
        auto add_squares = [&](auto* o, auto* t) {
          for (int64_t j = 0, m = out.numel(); j < m; ++j) tot.sq += double(o[j] - t[j]) * double(o[j] - t[j]);
        };
        if (out.dtype() == DType::F64) add_squares(out.data<double>(), y.data<double>());
        else add_squares(out.data<float>(), y.data<float>());
        return;
      }
      in[eval_->labels] = y;
      auto out = ex.run(in);
      if (eval_->classes > 10) tot.top5 += top5_count(to_host(out.at(graphs_.logits)), to_host(y));
    };
    // This part's batch: halved where its first run, at the first batch, runs out of memory (the count
    // that chose it leaves out scratch and library workspaces). Nothing was added to its totals then.
    int64_t per_run = batch;
    for (int64_t i = first; i < end;) {
      const int64_t n = std::min(per_run, end - i);
      try {
        run_batch(i, n);
      } catch (const OutOfMemory& e) {
        if (i != first || n == 1) throw;
        per_run = n / 2;
        ex.set_max_plans(1);
        if (counts()) {
          ex.set_state(eval_->correct_total, zero);
          ex.set_state(eval_->loss_total, zero);
        }
        std::lock_guard<std::mutex> lock(shrink_mu);
        shrunk = std::min(shrunk, per_run);
        if (!said && opts_.log && speaks())
          *opts_.log << "evaluating in batches of " << per_run << ", not " << n << ": " << e.what() << std::endl;
        said = true;
        continue;
      }
      i += n;
    }
    if (!counts()) return;
    eval_->parts[p].totals->post(0, {&ex.state(eval_->correct_total), &ex.state(eval_->loss_total)});
    const float* t = eval_->parts[p].totals->read(0);
    tot.correct = t[0];
    tot.loss = t[1];
  };
  std::vector<PartTotals> tots(static_cast<size_t>(P));
  run_at_once(P, [&](int p) { run_part(p, tots[p]); });
  eval_->batch = agreed_batch(shrunk, G > P);  // (the next evaluation starts there)

  // Every replica's totals, in the job's replica order (other ranks' through one allgather).
  if (G > P) {
    std::string mine(sizeof(PartTotals) * tots.size(), '\0');
    std::memcpy(mine.data(), tots.data(), mine.size());
    std::vector<PartTotals> every;
    for (const std::string& theirs : mpi::allgather(mine, "evaluation")) {
      GR_CHECK(theirs.size() % sizeof(PartTotals) == 0, "evaluation: a rank sent " << theirs.size() << " bytes of totals");
      const size_t at = every.size();
      every.resize(at + theirs.size() / sizeof(PartTotals));
      std::memcpy(static_cast<void*>(every.data() + at), theirs.data(), theirs.size());
    }
    GR_CHECK(static_cast<int64_t>(every.size()) == G,
             "evaluation: the ranks sent the totals of " << every.size() << " replicas, not " << G);
    tots = std::move(every);
  }
  PartTotals all;
  for (const PartTotals& t : tots) {
    all.correct += t.correct;
    all.loss += t.loss;
    all.sq += t.sq;
    all.top5 += t.top5;
  }
  if (mse()) {
    st.loss = all.sq / double(N * test_src_->spec(data::kLabels).numel());
    return st;
  }
  if (own_loss()) {
    st.loss = all.loss / double(N);
    return st;
  }
  st.accuracy = all.correct / (double(N) * positions_);
  st.loss = all.loss / (double(N) * positions_);
  if (eval_->classes > 10) st.top5 = double(all.top5) / N;
  return st;
}

}  // namespace graphrun::runtime
