// graphrun train: data-parallel training of an ONNX model on Fashion-MNIST, or on the user's own data
// (.npz, .npy folders, image folders: runtime/data/source.h).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <iomanip>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "autodiff/autodiff.h"
#include "graph/float64.h"
#include "graph/onnx_io.h"
#include "runtime/comm/mpi.h"
#include "runtime/plan.h"
#include "runtime/trainer.h"
#include "runtime/device.h"
#include "runtime/interrupt.h"
#include "runtime/pipeline.h"
#include "tools/backward_options.h"
#include "tools/cli.h"
#include "tools/optimizer_options.h"

namespace graphrun::cli {

namespace {

const Command& train_command() {
  static const Command cmd{
      "train",
      "graphrun train MODEL.onnx [--devices cpu:N] [--batch-size 256] [--lr 0.2] [--epochs 10] [options]",
      "Trains a classifier (or, with --loss mse, a regressor; with --loss output, a model that computes its own loss)\n"
      "data-parallel: the training graph is replicated once per device, gradients are summed\n"
      "by AllReduce nodes, and every replica applies the same optimizer update (SGD, Adam, AdamW or Adagrad).",
      {
          {"devices", "LIST", "cpu:N (N CPU replicas), cpu:0,cpu:1, or cuda:0,1 (default: cpu:R, R = min(cores, 4));\n"
                              "                            cpu:auto: time each split of the cores into replicas x threads\n"
                              "                            on this model (as graphrun plan does) and train on the fastest"},
          {"gpus", "N", "train on N GPUs (cuda:0..N-1)"},
          {"deterministic", "", "GPU: deterministic cuDNN algorithms (bitwise repeatable, somewhat slower)"},
          {"device-data-mb", "MB", "GPU: keep the training and test data on each GPU when it takes at most MB\n"
                                   "                            (default 4096); larger data is copied batch by batch"},
          {"bucket-mb", "MB", "gradients per AllReduce node, in MB (default 4; as DDP's bucket_cap_mb)"},
          {"overlap-allreduce", "on|off", "AllReduce runs while the rest of the backward pass does (default: on\n"
                                          "                            for GPUs, off for CPU replicas, where it does not pay)"},
          {"comm-timeout", "S", "seconds a replica waits for the others in an AllReduce (default 60); then\n"
                                "                            every replica stops, naming the missing ones (hung or dead);\n"
                                "                            under MPI, every collective between ranks too; on NCCL GPUs,\n"
                                "                            every host wait for the device (then ncclCommAbort)"},
          {"batch-size", "B", "global batch, split over the replicas (default 256; with --eval-only\n"
                                "                            the evaluation's, else 128 per replica)"},
          {"lr", "RATE", "learning rate (default 0.2)"},
          {"epochs", "E", "epochs (default 10)"},
          {"momentum", "M", "SGD momentum (default 0)"},
          {"weight-decay", "WD", "weight decay (default 0; 0.01 for adamw, as torch's): L2 for sgd and adam\n"
                                  "                            (as torch.optim.SGD/Adam), decoupled for adamw (as torch.optim.AdamW)"},
          {"nesterov", "", "Nesterov momentum (needs --momentum)"},
          {"threads", "N", "intra-op threads per replica (default: cores / replicas, at least 1)"},
          {"seed", "S", "seed of the data order and of dropout (default 0)"},
          {"data", "PATH", "training data, recognised from what PATH is: an MNIST folder\n"
                           "                            {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (default\n"
                           "                            /usr/share/datasets/fashion-mnist), an .npz file, a folder of\n"
                           "                            .npy files (one array per model input, by name, and labels),\n"
                           "                            class folders of PNG/JPEG images (classes sorted by name), or a\n"
                           "                            .csv/.tsv table with a header (the --labels column the targets,\n"
                           "                            the other columns the features: see --columns)"},
          {"test-data", "PATH", "test data of the same kinds (default: an MNIST folder's t10k split, else --val-split)"},
          {"val-split", "F", "hold out a seeded fraction F of the training data as test data (default 0.1\n"
                             "                            when the data has no test split)"},
          {"labels", "NAME", "the array of targets in .npz/.npy data, the column of a table (default labels)"},
          {"columns", "INPUT=COL,...", "a table's columns that feed model input INPUT, in that order (repeated\n"
                                       "                            for each input; columns no input names are not read); by\n"
                                       "                            default a one-input model takes every column but the targets,\n"
                                       "                            a model of several inputs each input the column of its name;\n"
                                       "                            an int64 input takes integers (embedding ids)", true},
          {"augment", "", "image inputs: random crop with 4-pixel padding and horizontal flip, seeded by\n"
                          "                            --seed, on the loader threads"},
          {"loader-threads", "N", "threads per replica reading batches ahead (default, for images or --augment:\n"
                                  "                            the cores the replicas leave over, at least 1; else 0)"},
          {"save", "FILE", "write the trained model as ONNX: the input's graph in inference form (BatchNorm\n"
                           "                            on running statistics, Dropout off, Gradient nodes kept) with\n"
                           "                            the trained weights; a model read with external data, or\n"
                           "                            over 1 GiB of weights, keeps its weights in FILE.data beside it"},
          {"metrics", "FILE", "write one JSON object per epoch (with --eval-only: one for the evaluation)"},
          {"loss", "NAME", "cross-entropy (default; integer class ids), mse (float targets of the\n"
                           "                            output's shape; the test figure is the mean squared error) or\n"
                           "                            output: the model computes its loss (forward(x, y) -> loss, an ELBO):\n"
                           "                            no labels; the data's arrays feed every input by name; training\n"
                           "                            minimises --loss-output's mean, and the test figure is that mean"},
          {"loss-output", "NAME", "the model output the loss and the evaluation read (default: the first output)"},
          {"label-smoothing", "EPS", "cross-entropy with label smoothing EPS, 0 <= EPS < 1 (default 0: none), as\n"
                                     "                            torch.nn.CrossEntropyLoss(label_smoothing=EPS): (1 - EPS) x NLL\n"
                                     "                            + EPS x mean over examples of -(1/C) sum_c log_softmax(x)_c; the\n"
                                     "                            epoch and --log-every losses are this loss; the test figures\n"
                                     "                            are not smoothed (--eval-only's test loss: plain cross-entropy)"},
          {"max-steps", "N", "stop each epoch after N steps (for quick runs; 0: the whole epoch, the default)"},
          {"optimizer", "NAME", "sgd (default; with --momentum/--nesterov), adam, adamw (decoupled weight\n"
                                "                            decay, as torch.optim.AdamW; adam's --weight-decay is L2, as torch's)\n"
                                "                            or adagrad (torch.optim.Adagrad; --eps, --lr-decay, --weight-decay)"},
          {"beta1", "B1", "adam/adamw: decay of the first moment (default 0.9)"},
          {"beta2", "B2", "adam/adamw: decay of the second moment (default 0.999)"},
          {"eps", "EPS", "adam/adamw: epsilon (default 1e-8); adagrad: its epsilon (default 1e-10)"},
          {"lr-decay", "D", "adagrad: the learning rate's decay, lr / (1 + step x D) (default 0)"},
          {"clip-grad-norm", "MAX", "scale the summed gradients so that their global L2 norm is at most MAX,\n"
                                    "                            before weight decay and the step (torch's clip_grad_norm_)"},
          {"lr-schedule", "KIND", "constant (default), step (x --lr-gamma every --lr-step-size steps) or cosine\n"
                                  "                            (lr x 0.5 (1 + cos(pi (s - W) / (T - W))) at step s of T, the\n"
                                  "                            run's steps: 0 just after the last; e.g. T = 6: 0.067 lr at the\n"
                                  "                            last); per step, after the W = --warmup-steps"},
          {"warmup-steps", "N", "ramp the learning rate linearly over the first N steps: lr x (s + 1) / N at\n"
                                "                            step s < N (default 0; more than the run's steps: a warning)"},
          {"lr-step-size", "N", "step schedule: steps between decays"},
          {"lr-gamma", "G", "step schedule: the factor of each decay (default 0.1)"},
          {"freeze", "NAMES", "parameters that are not trained: no gradient, no allreduce, no update\n"
                              "                            (comma-separated or repeated); a module name (fc1) freezes\n"
                              "                            its parameters (fc1.weight, fc1.bias); the model's metadata\n"
                              "                            may name more (graphrun.frozen: torch's buffers, README)", true},
          {"normalize", "MEAN,STD", "feed (x - MEAN) / STD (e.g. 0.1307,0.3081) in training and evaluation;\n"
                                    "                            per channel: M1,M2,M3/S1,S2,S3 (e.g. 0.485,0.456,0.406/0.229,0.224,0.225)"},
          {"eval-only", "", "evaluate the model as given on the test data training would use (--test-data\n"
                            "                            alone, without reading --data; else --val-split's held-out\n"
                            "                            share, or an MNIST folder's t10k split): accuracy and loss, or mse"},
          {"log-every", "N", "print the mean training loss of every N steps"},
          {"checkpoint-dir", "DIR", "write a checkpoint after every epoch (weights, optimizer state, running\n"
                                    "                            statistics, RNG, epoch/step; mid-epoch, the epoch's loss and\n"
                                    "                            accuracy sums so far), atomically. Checked at start: it must\n"
                                    "                            be writable, and without --resume hold no checkpoints"},
          {"checkpoint-every", "N", "also write one every N steps (needs --checkpoint-dir)"},
          {"keep-checkpoints", "K", "keep the newest K checkpoints (default 3)"},
          {"resume", "", "continue from the newest checkpoint in --checkpoint-dir (same model and\n"
                         "                            settings): the same weights and epoch figures as an\n"
                         "                            uninterrupted run. The step's settings (--lr and its schedule,\n"
                         "                            --momentum, --nesterov, --weight-decay, --clip-grad-norm, Adam's)\n"
                         "                            may change, and each change is printed; another value of any\n"
                         "                            other setting is an error. A corrupt newest one (bad CRC or contents)\n"
                         "                            is skipped with a warning for the newest good one; none good:\n"
                         "                            an error"},
          {"profile", "FILE", "write a Chrome trace of the run to FILE (one track per replica: every node's\n"
                              "                            kernel, AllReduce waits, data, optimizer, steps; evaluation) and\n"
                              "                            print the ops by total time at the end (README: Profiling);\n"
                              "                            under MPI rank k>0 writes FILE.rankK\n"
                              "                            GRAPHRUN_SKIP_PASSES=fuse_relu_epilogue,... leaves executor-only\n"
                              "                            passes out, to measure what each saves"},
          {"profile-steps", "FIRST:LAST", "with --profile: record training steps FIRST to LAST only (global,\n"
                                          "                            from 1; 'FIRST:' to the end), as torch.profiler's schedule;\n"
                                          "                            evaluation is recorded throughout. E.g. 2:21 skips the\n"
                                          "                            first (planning) step and keeps a long run's trace small"},
          {"plan", "", "first print the plan of the run (graphrun plan, without its prediction): FLOPs per\n"
                       "                            step, memory per replica, AllReduce buckets; costs one extra step"},
          {"float64", "", "train a float64 copy of the model (as graphrun check makes it: f32 weights,\n"
                          "                            values, casts and constants become f64; f32 data is fed as f64);\n"
                          "                            slower, for checks that float32's rounding would drown\n"
                          "                            (README: SyncBatchNorm at full size); --save writes f64;\n"
                          "                            every optimizer, its state f64; CPU replicas"},
          dump_after_option(),
          sync_bn_option(),
      },
      "The model takes inputs of any shape (f32 images [N,C,H,W], int64 tokens [N,T], tabular [N,F]; several\n"
      "are fed from the data's arrays of their names; uint8 data becomes f32 / 255) and returns class scores f32[N,classes] (top-5 accuracy too above 10 classes)\n"
      "or, with --loss mse, values of the targets' shape. Class scores are logits: cross-entropy applies softmax\n"
      "itself, so an output straight from a Softmax node is a warning (export the logits, or LogSoftmax).\n"
      "Bad data (arrays of different lengths, a shape or\n"
      "dtype the input cannot take, labels out of range, NaN targets, unreadable images) is one line, exit 2.\n"
      "Output: a progress bar (on a terminal), one line per epoch, and `test acc: 0.84, 5.1 sec/epoch on [...]`;\n"
      "sec/epoch counts the training steps only, like d2l's timer. Test accuracy uses replica 0's weights and\n"
      "BatchNorm running statistics (broadcast to the other replicas after each epoch, as DDP keeps buffers).\n"
      "A last batch smaller than the number of replicas is skipped; other partial batches are kept.\n"
      "Optimizers are nodes of the training graph (ai.onnx.preview.training Momentum; ai.graphrun.Adam, ONNX's\n"
      "Adam with epsilon where torch.optim.Adam puts it; AdamW adds its decay as Mul/Sub); `graphrun grad\n"
      "--devices N` and `show --devices N` show them.\n"
      "Stopping: Ctrl-C (SIGINT) or SIGTERM (under mpirun: SIGUSR1 to mpirun) stops every replica after the\n"
      "steps under way and writes a checkpoint of that step (with --checkpoint-dir; rerun with --resume to go\n"
      "on, bitwise as if never stopped); --save is not written. A second signal ends the process at once.\n"
      "Exit codes: 0 done, 2 bad input (flags, model, data, a corrupt or foreign checkpoint), 3 the loss\n"
      "became NaN or Inf (the message names the step; checkpoints written before it are kept), 128 + the\n"
      "signal when stopped (130 Ctrl-C, 143 SIGTERM, 138 SIGUSR1).\n"
      "\n"
      "examples:\n"
      "  graphrun train models/lenet.onnx --devices cpu:2 --batch-size 256 --lr 0.2 --epochs 10\n"
      "  graphrun train models/lenet.onnx --save lenet.trained.onnx --metrics run.jsonl\n"
      "  graphrun train models/simplecnn.onnx --optimizer adam --lr 1e-3 --batch-size 64 \\\n"
      "      --normalize 0.1307,0.3081 --epochs 1 --devices cpu:2\n"
      "  graphrun train models/lenet.onnx --checkpoint-dir ck --epochs 10   # stopped or killed? rerun with --resume\n"
      "  graphrun train model.onnx --data train.npz --test-data test.npz\n"
      "  graphrun train resnet18.onnx --data images/train --test-data images/val --augment\n"
      "  graphrun train regressor.onnx --data houses.npz --loss mse --val-split 0.2\n"
      "  graphrun train vae.onnx --loss output --optimizer adam --lr 1e-3   # its output is its loss\n"
      "\n"
      "Under MPI (mpirun -np K graphrun train ...) each rank trains its --devices (or --gpus N: the GPUs from\n"
      "local rank x N); the batch splits over the replicas of all ranks as in one process, and the CPU sums in\n"
      "global replica order (-np K --devices cpu:1 equals --devices cpu:K bitwise). Rank 0 alone prints and\n"
      "writes --metrics, --save and checkpoints; a failed rank ends the job, a hung one within --comm-timeout.\n"
      "  mpirun -np 2 graphrun train models/lenet.onnx --devices cpu:1"};
  return cmd;
}

// Cross-entropy applies softmax to what it reads: a model that ends in Softmax has it applied twice
// (as torch's CrossEntropyLoss would, silently). One warning line on stderr naming the node.
void warn_softmax_output(const Graph& g, const std::string& output) {
  std::string v = output.empty() ? (g.outputs.empty() ? std::string() : g.outputs[0]) : output;
  for (int hops = 0; !v.empty() && hops < 64; ++hops) {
    const int p = g.producer(v);
    if (p < 0) return;
    const Node& n = g.nodes[p];
    if (!n.domain.empty() && n.domain != "ai.onnx") return;
    if (n.op_type == "Identity") {
      v = n.inputs.empty() ? std::string() : n.inputs[0];
      continue;
    }
    if (n.op_type == "Softmax")
      std::cerr << "graphrun train: warning: the loss reads '" << (output.empty() ? g.outputs[0] : output)
                << "', the output of Softmax node '" << (n.name.empty() ? v : n.name)
                << "', and cross-entropy applies softmax itself, so it is applied twice; export the logits "
                   "(or LogSoftmax: cross-entropy on log-probabilities is their NLL)"
                << std::endl;
    return;
  }
}

// The first six of `names` on stderr, comma-separated, then how many more.
void print_first_names(const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size() && i < 6; ++i) std::cerr << (i ? ", " : "") << names[i];
  if (names.size() > 6) std::cerr << ", and " << names.size() - 6 << " more";
}

// Initializers the model's metadata says are no parameters (torch's buffers): one note naming them, since
// --freeze did not.
void note_metadata_frozen(const Graph& forward) {
  const std::vector<std::string> frozen = autodiff::metadata_frozen(forward);
  if (frozen.empty()) return;
  std::cerr << "graphrun train: note: the model's metadata (" << autodiff::kFrozenMetadataKey << ") names "
            << frozen.size() << " initializer" << (frozen.size() > 1 ? "s" : "") << " no parameter (";
  print_first_names(frozen);
  std::cerr << "): not trained" << std::endl;
}

// Parameters the loss does not reach get no gradient, so no update and no weight decay (torch's .grad
// None): one note on stderr naming them, since a user may expect them trained.
void note_unreached(const runtime::TrainingGraphs& tg, const std::set<std::string>& freeze) {
  const std::set<std::string> trained(tg.params.begin(), tg.params.end());
  std::vector<std::string> unreached;
  for (const auto& p : autodiff::trainable_params(tg.forward, freeze))
    if (!trained.count(p)) unreached.push_back(p);
  if (unreached.empty()) return;
  std::cerr << "graphrun train: note: the loss does not reach " << unreached.size() << " parameter"
            << (unreached.size() > 1 ? "s" : "") << " (";
  print_first_names(unreached);
  std::cerr << "): not trained, no weight decay, as torch leaves a parameter without a gradient" << std::endl;
}

// The shapes per example that a source gives the model's inputs (and the labels, under the training
// graph's input "labels"): each input's array by its name, a one-input model's the source's only array
// besides the targets. What graphrun plan sizes symbolic dimensions by (PlanOptions::example_shapes).
std::map<std::string, Shape> example_shapes(const Graph& model, const runtime::data::Source& src,
                                            const std::string& labels) {
  std::map<std::string, Shape> r;
  for (const std::string& in : model.inputs)
    if (const auto* a = src.find(in)) r[in] = a->shape;
  if (model.inputs.size() == 1 && !r.count(model.inputs[0])) {
    const runtime::data::ArraySpec* only = nullptr;
    int others = 0;
    for (const auto& a : src.arrays())
      if (a.name != labels) only = &a, ++others;
    if (others == 1) r[model.inputs[0]] = only->shape;
  }
  if (const auto* t = src.find(labels)) r["labels"] = t->shape;
  return r;
}

}  // namespace

int cmd_train(const std::vector<std::string>& argv) {
  // Before any thread starts: Ctrl-C, SIGTERM and SIGUSR1 go to a thread of their own (runtime/interrupt.h).
  runtime::interrupt::take_signals(runtime::mpi::active() && runtime::mpi::size() > 1);
  const Command& cmd = train_command();
  Args args(cmd, argv);
  if (args.help()) {
    std::cout << cmd.help();
    return 0;
  }
  if (args.positional().size() != 1)
    throw Error(args.usage_error(args.positional().empty() ? "no model given"
                                                           : "expected one model file, got " +
                                                                 std::to_string(args.positional().size())));
  auto bad = [&](const std::string& msg) { return Error(args.usage_error(msg)); };
  // Under a tight address-space limit the failures come from inside libraries (oneDNN's code generator
  // crashes when its first GEMM cannot map memory, a thread cannot start): below the floor every measured
  // run needs, one line instead of a crash.
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && as.rlim_cur < (rlim_t(640) << 20))
    throw Error("the address-space limit (ulimit -v) is " + std::to_string(as.rlim_cur >> 20) +
                " MiB: graphrun train needs at least 640 MiB of address space (threads' stacks, the kernels' "
                "generated code, the model and its data); raise the limit");

  runtime::TrainOptions o;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (args.has("gpus") && args.has("devices")) throw bad("give --gpus or --devices, not both");
  const bool auto_placement = args.has("devices") && args.get("devices") == "cpu:auto";
  std::vector<Device> devices;
  if (args.has("gpus")) {
    const int64_t n = args.get_int("gpus", 0);
    if (n < 1 || n > 64) throw bad("--gpus must be between 1 and 64, got " + args.get("gpus"));
    // Under MPI a rank takes the N GPUs from local_rank * N (Horovod's one GPU per rank: --gpus 1).
    const int first = static_cast<int>(n) * runtime::mpi::local_rank();
    for (int i = 0; i < n; ++i) devices.push_back(Device{Device::Kind::CUDA, first + i});
  } else if (auto_placement) {
    if (args.has("threads")) throw bad("--devices cpu:auto chooses the threads: give --threads with cpu:N instead");
    if (runtime::mpi::size() > 1)
      throw bad("--devices cpu:auto is not supported under MPI: give each rank cpu:N (and --threads)");
    devices.push_back(Device{Device::Kind::CPU, 0});  // until the model is timed
  } else if (args.has("devices")) {
    try {
      devices = runtime::parse_devices(args.get("devices"));
    } catch (const Error& e) {
      throw bad(std::string("--devices: ") + e.what());
    }
  } else {
    const int n = std::max(1, std::min(cores, 4) / runtime::mpi::local_size());  // ranks of a machine share it
    for (int i = 0; i < n; ++i) devices.push_back(Device{Device::Kind::CPU, i});
  }
  o.pipeline.devices = devices;
  if (args.has("bucket-mb")) {
    const double mb = args.get_double("bucket-mb", 4);
    if (!(mb > 0 && mb <= 1e6)) throw bad("--bucket-mb must be a positive number, got " + args.get("bucket-mb"));
    o.pipeline.bucket_bytes = std::max<size_t>(1, static_cast<size_t>(mb * (1 << 20)));
  }
  if (args.has("overlap-allreduce")) {
    const std::string v = args.get("overlap-allreduce");
    if (v != "on" && v != "off") throw bad("--overlap-allreduce takes on or off, got '" + v + "'");
    o.overlap_allreduce = v == "on";
  }
  if (args.has("deterministic")) {
    if (!devices.empty() && !devices[0].is_cpu() && runtime::backend_available(devices[0].kind))
      runtime::backend_for(devices[0].kind)->set_deterministic(true);  // CPU kernels are deterministic already
  }

  o.comm_timeout = args.get_double("comm-timeout", runtime::kDefaultCommTimeout);
  if (!(o.comm_timeout > 0) || !std::isfinite(o.comm_timeout))
    throw bad("--comm-timeout must be a positive number of seconds, got " + args.get("comm-timeout"));
  o.batch_size = args.get_int("batch-size", 256);
  if (o.batch_size < 1) throw bad("--batch-size must be at least 1, got " + args.get("batch-size"));
  if (o.batch_size < static_cast<int64_t>(devices.size()))
    throw bad("--batch-size " + std::to_string(o.batch_size) + " is smaller than the number of replicas (" +
              std::to_string(devices.size()) + "): each replica needs at least one example");
  o.lr = args.get_double("lr", 0.2);
  // (The graph feeds the rate as a float32: a value beyond its range would be inf there, one below
  // its smallest 0, and the run would train nothing.)
  if (!(o.lr > 0) || !std::isfinite(o.lr) || o.lr > std::numeric_limits<float>::max() ||
      static_cast<float>(o.lr) == 0.0f)
    throw bad("--lr must be a positive number within float32's range (about 1e-45 to 3e38), got " + args.get("lr"));
  const int64_t epochs = args.get_int("epochs", 10);
  if (epochs < 1 || epochs > 100000) throw bad("--epochs must be between 1 and 100000, got " + args.get("epochs"));
  o.epochs = static_cast<int>(epochs);
  if (args.has("threads")) {
    const int64_t t = args.get_int("threads", 1);
    if (t < 1 || t > 1024) throw bad("--threads must be between 1 and 1024, got " + args.get("threads"));
    o.threads = static_cast<int>(t);
  }
  const int64_t seed = args.get_int("seed", 0);
  if (seed < 0) throw bad("--seed must be >= 0, got " + args.get("seed"));
  o.seed = static_cast<uint64_t>(seed);
  o.max_steps = args.get_int("max-steps", 0);
  if (args.has("device-data-mb")) {
    const int64_t mb = args.get_int("device-data-mb", 0);
    if (mb < 0 || mb > (int64_t(1) << 30)) throw bad("--device-data-mb must be between 0 and 1073741824, got " + args.get("device-data-mb"));
    o.device_data_budget = mb << 20;
  }
  if (o.max_steps < 0) throw bad("--max-steps must be >= 0, got " + args.get("max-steps"));
  o.pipeline.loss = parse_loss(args);
  o.pipeline.output = args.get("loss-output");
  o.pipeline.label_smoothing = parse_label_smoothing(args, o.pipeline.loss);
  o.pipeline.optimizer = parse_optimizer_options(args, true);
  try {
    o.schedule.kind = runtime::parse_schedule_kind(args.get("lr-schedule", "constant"));
  } catch (const Error& e) {
    throw bad(std::string("--lr-schedule: ") + e.what());
  }
  o.schedule.warmup_steps = args.get_int("warmup-steps", 0);
  if (o.schedule.warmup_steps < 0) throw bad("--warmup-steps must be >= 0, got " + args.get("warmup-steps"));
  o.schedule.step_size = args.get_int("lr-step-size", 0);
  o.schedule.gamma = args.get_double("lr-gamma", 0.1);
  if (o.schedule.kind == runtime::LrSchedule::Kind::Step && o.schedule.step_size < 1)
    throw bad("--lr-schedule step needs --lr-step-size N (N >= 1)");
  if (!(o.schedule.gamma > 0) || !std::isfinite(o.schedule.gamma))
    throw bad("--lr-gamma must be a positive number, got " + args.get("lr-gamma"));
  if ((args.has("lr-step-size") || args.has("lr-gamma")) && o.schedule.kind != runtime::LrSchedule::Kind::Step)
    throw bad("--lr-step-size/--lr-gamma need --lr-schedule step");
  for (const auto& f : args.all("freeze")) o.pipeline.freeze.insert(f);
  o.pipeline.sync_bn = args.has("sync-bn");
  check_dump_after_option(args);
  o.pipeline.dump_after = args.get("dump-after");
  if (args.has("normalize") && args.get("normalize").find('/') != std::string::npos) {
    try {
      o.channel_norm = runtime::data::parse_normalize(args.get("normalize"));
    } catch (const Error& e) {
      throw bad(e.what());
    }
  } else if (args.has("normalize")) {
    // (Split strictly: "0.1,,0.3" is no MEAN,STD, where a list of names would skip the empty item.)
    std::vector<std::string> ms;
    {
      std::stringstream list(args.get("normalize") + ",");
      for (std::string item; std::getline(list, item, ',');) ms.push_back(item);
    }
    double mean = 0, sd = 0;
    bool ok = ms.size() == 2;
    try {
      size_t a = 0, b = 0;
      if (ok) mean = std::stod(ms[0], &a), sd = std::stod(ms[1], &b);
      ok = ok && a == ms[0].size() && b == ms[1].size();
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok || !(sd > 0) || !std::isfinite(mean) || !std::isfinite(sd))
      throw bad("--normalize takes MEAN,STD with STD > 0 (e.g. 0.1307,0.3081), got '" + args.get("normalize") + "'");
    o.normalize = true;
    o.norm_mean = static_cast<float>(mean);
    o.norm_std = static_cast<float>(sd);
  }
  o.log_every = args.get_int("log-every", 0);
  if (o.log_every < 0) throw bad("--log-every must be >= 0, got " + args.get("log-every"));
  o.checkpoint_dir = args.get("checkpoint-dir");
  o.checkpoint_every = args.get_int("checkpoint-every", 0);
  if (o.checkpoint_every < 0) throw bad("--checkpoint-every must be >= 0, got " + args.get("checkpoint-every"));
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) throw bad("--checkpoint-every needs --checkpoint-dir");
  const int64_t keep = args.get_int("keep-checkpoints", 3);  // (checked before it narrows to int)
  if (keep < 1 || keep > 1000000)
    throw bad("--keep-checkpoints must be in 1..1000000, got " + args.get("keep-checkpoints"));
  o.keep_checkpoints = static_cast<int>(keep);
  if (args.has("keep-checkpoints") && o.checkpoint_dir.empty()) throw bad("--keep-checkpoints needs --checkpoint-dir");
  o.resume = args.has("resume");
  if (o.resume && o.checkpoint_dir.empty()) throw bad("--resume needs --checkpoint-dir DIR");
  const bool eval_only = args.has("eval-only");
  if (eval_only && (o.resume || !o.checkpoint_dir.empty() || args.has("save")))
    throw bad("--eval-only trains nothing: it takes no --checkpoint-dir, --resume or --save");
  // The test loss is the model's plain cross-entropy, whatever loss trained it: a smoothing that would
  // change nothing there would suggest it did.
  if (eval_only && args.has("label-smoothing"))
    throw bad("--eval-only's test loss is plain cross-entropy: it takes no --label-smoothing");
  // Nor the flags of training, which it would silently ignore.
  if (eval_only)
    for (const char* f : {"epochs", "max-steps", "lr", "lr-schedule", "warmup-steps", "lr-step-size", "lr-gamma", "optimizer",
                          "momentum", "nesterov", "weight-decay", "clip-grad-norm", "beta1", "beta2", "eps", "freeze",
                          "sync-bn", "augment", "log-every", "bucket-mb", "overlap-allreduce", "profile-steps",
                          "dump-after", "plan"})
      if (args.has(f)) throw bad(std::string("--eval-only trains nothing: it takes no --") + f);
  o.data_dir = args.get("data", runtime::data::kDefaultDataDir);
  o.test_data = args.get("test-data");
  o.test_only = eval_only;
  // --eval-only --batch-size B: the evaluation's batch, B over the job's replicas (as a training batch
  // is split); without it each replica evaluates 128 at a time.
  if (eval_only && args.has("batch-size")) {
    const int64_t replicas = static_cast<int64_t>(devices.size()) * runtime::mpi::size();
    o.eval_batch = (o.batch_size + replicas - 1) / replicas;
  }
  if (args.has("val-split")) {
    o.val_split = args.get_double("val-split", 0.1);
    if (!(o.val_split > 0 && o.val_split < 1)) throw bad("--val-split must be between 0 and 1, got " + args.get("val-split"));
    if (!o.test_data.empty()) throw bad("give --test-data or --val-split, not both");
  }
  o.labels = args.get("labels", runtime::data::kLabels);
  for (const std::string& g : args.given("columns")) {
    const size_t eq = g.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == g.size())
      throw bad("--columns takes INPUT=COL,COL,..., got '" + g + "'");
    runtime::data::ColumnGroup group{g.substr(0, eq), {}};
    std::stringstream ss(g.substr(eq + 1));
    for (std::string col; std::getline(ss, col, ',');) {
      if (col.empty()) throw bad("--columns " + g + ": an empty column name");
      group.columns.push_back(col);
    }
    for (const auto& other : o.columns)
      if (other.input == group.input) throw bad("--columns names input '" + group.input + "' twice");
    o.columns.push_back(group);
  }
  if (!o.columns.empty())
    for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--data", eval_only ? "" : o.data_dir},
                                     {"--test-data", o.test_data}}) {
      std::string kind;
      try {
        if (!path.empty()) kind = runtime::data::source_kind(path);
      } catch (const Error&) {
        continue;  // the trainer names what is wrong with it
      }
      if (!kind.empty() && kind != "csv")
        throw bad("--columns picks a table's columns, but " + flag + " '" + path + "' is no .csv/.tsv table");
    }
  if (args.has("labels") && o.pipeline.loss == autodiff::LossKind::Output)
    throw bad("--loss output reads no targets: the model computes its loss from its inputs (it takes no --labels)");
  o.augment = args.has("augment");
  if (args.has("loader-threads")) {
    const int64_t t = args.get_int("loader-threads", 0);
    if (t < 0 || t > 256) throw bad("--loader-threads must be between 0 and 256, got " + args.get("loader-threads"));
    o.loader_threads = static_cast<int>(t);
  }
  o.save_path = args.get("save");
  o.metrics_path = args.get("metrics");
  // Under MPI rank 0 alone speaks (runtime/comm/mpi.h); the trainer writes files only there.
  const bool speaks = runtime::mpi::rank() == 0;
  o.log = speaks ? &std::cout : nullptr;
  o.pipeline.dump = speaks ? &std::cout : nullptr;  // --dump-after: every rank builds the same graph
  if (!speaks) o.progress = 0;
  // Every rank traces its own replicas: rank 0 to FILE (and prints the table), rank k to FILE.rankK.
  std::string profile_path = args.get("profile");
  if (!profile_path.empty() && !speaks) profile_path += ".rank" + std::to_string(runtime::mpi::rank());
  // Output files: never one this command reads, checked writable now (unchanged), not after training.
  check_distinct_paths({{"the model", args.positional()[0]}, {"--data", o.data_dir}, {"--test-data", o.test_data}},
                       {{"--save", o.save_path}, {"--metrics", o.metrics_path}, {"--profile", profile_path}}, {"--save"});
  if (speaks)
    for (const auto& [flag, path] : {std::pair{"--save", o.save_path}, std::pair{"--metrics", o.metrics_path}})
      if (!path.empty()) check_output_path(flag, path);
  if (speaks && !o.checkpoint_dir.empty()) check_checkpoint_dir(o.checkpoint_dir, o.resume);
  std::unique_ptr<runtime::Profiler> profiler;
  if (args.has("profile-steps") && profile_path.empty()) throw bad("--profile-steps needs --profile FILE");
  if (!profile_path.empty()) {
    check_output_path("--profile", profile_path);
    profiler = std::make_unique<runtime::Profiler>();
    o.profiler = profiler.get();
    if (args.has("profile-steps")) {
      const std::string w = args.get("profile-steps");
      const size_t colon = w.find(':');
      auto number = [](const std::string& t) -> int64_t {
        if (t.empty() || t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos) return -1;
        return std::stoll(t);
      };
      const int64_t first = colon == std::string::npos ? -1 : number(w.substr(0, colon));
      const std::string rest = colon == std::string::npos ? "" : w.substr(colon + 1);
      const int64_t last = rest.empty() ? 0 : number(rest);
      if (first < 1 || last < 0 || (last > 0 && last < first))
        throw bad("--profile-steps: '" + w + "' is not FIRST:LAST (steps from 1 to 999999999999, LAST >= FIRST) or FIRST:");
      profiler->set_step_window(first, last);
    }
  }
  auto finish_profile = [&] {
    if (!profiler) return;
    if (speaks) profiler->finish(profile_path, eval_only ? "evaluate" : "step", std::cout);
    else profiler->write_trace(profile_path);
  };
  runtime::check_devices_available(devices);
  std::unique_ptr<runtime::KernelWarmUp> warm_up;  // CPU replicas: the GEMM's kernels compile during setup
  if (auto_placement || devices.empty() || devices[0].kind == Device::Kind::CPU)
    warm_up = std::make_unique<runtime::KernelWarmUp>();

  Graph model = load_onnx_for_training(args.positional()[0]);
  if (speaks && o.pipeline.loss == autodiff::LossKind::CrossEntropy) warn_softmax_output(model, o.pipeline.output);
  if (args.has("float64")) model = float64_copy(model);
  for (const auto& group : o.columns)
    if (std::find(model.inputs.begin(), model.inputs.end(), group.input) == model.inputs.end()) {
      std::string inputs;
      for (const auto& in : model.inputs) inputs += (inputs.empty() ? "" : ", ") + in;
      throw bad("--columns " + group.input + "=...: the model has no input '" + group.input + "' (its inputs: " +
                inputs + ")");
    }
  // Timing or planning the model (cpu:auto, --plan) at the data's sizes: a symbolic dimension other than
  // the batch (a sequence length) takes the size the training data gives it. Read only when the model has
  // such a dimension (an image folder is not listed twice for nothing).
  std::map<std::string, Shape> data_shapes;
  if (auto_placement || args.has("plan")) {
    bool symbolic = false;
    for (const std::string& in : model.inputs)
      if (const ValueInfo* vi = model.info(in))
        for (size_t i = 1; i < vi->shape.size(); ++i) symbolic = symbolic || !vi->shape[i].known();
    if (symbolic) {
      try {
        runtime::data::OpenOptions oo;
        oo.labels = o.labels;
        oo.targets = false;  // shapes only
        oo.columns = o.columns;
        for (const std::string& in : model.inputs)
          oo.inputs[in] = model.info(in) ? model.info(in)->dtype : DType::F32;
        data_shapes = example_shapes(model, *runtime::data::open_source(o.data_dir, oo), o.labels);
      } catch (const Error&) {
        // The trainer reports what is wrong with the data; the plan then names the dimension it lacks.
      }
    }
  }
  if (auto_placement) {
    // Each split of the cores into replicas x threads, timed on this model as graphrun plan times it.
    runtime::PlanOptions po;
    po.example_shapes = data_shapes;
    po.sized_by_data = true;
    po.pipeline = o.pipeline;
    po.pipeline.dump_after.clear();  // the chosen run dumps, not the timing runs
    po.batch_size = o.batch_size;
    po.measure_steps = 2;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<runtime::CpuPlacement> ranked;
    try {
      ranked = runtime::compare_cpu_placements(model, po, cores);
    } catch (const Error& e) {
      throw Error(std::string("--devices cpu:auto cannot time this model: ") + e.what() +
                  "; choose the replicas with --devices cpu:N");
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    devices.clear();
    for (int i = 0; i < ranked.at(0).replicas; ++i) devices.push_back(Device{Device::Kind::CPU, i});
    o.pipeline.devices = devices;
    o.threads = ranked[0].threads;
    if (speaks) {
      std::cout << runtime::describe_placements(ranked) << ", timed in " << std::fixed << std::setprecision(1) << took
                << " s" << std::defaultfloat << std::endl;
      bool bn = false;
      for (const Node& n : model.nodes) bn = bn || n.op_type == "BatchNormalization";
      if (bn && ranked.size() > 1 && !o.pipeline.sync_bn)
        std::cout << "note: BatchNormalization normalises over each replica's shard, so the placement decides its "
                     "batch statistics (--sync-bn: over the whole batch, whatever the placement)"
                  << std::endl;
    }
  }
  if (args.has("plan") && speaks) {
    runtime::PlanOptions po;
    po.pipeline = o.pipeline;
    po.devices = static_cast<int>(devices.size()) * runtime::mpi::size();
    po.batch_size = o.batch_size;
    po.threads = o.threads > 0 ? o.threads
                               : std::max(1, cores / (static_cast<int>(devices.size()) * runtime::mpi::local_size()));
    po.predict = false;
    po.example_shapes = data_shapes;
    po.sized_by_data = true;
    runtime::print_plan_brief(std::cout, runtime::make_plan(model, po));
  }
  runtime::Trainer trainer(std::move(model), o);  // the weights as loaded are then held once
  const runtime::LrSchedule& sched = trainer.schedule();
  if (!eval_only && speaks && sched.warmup_steps > sched.total_steps)
    std::cerr << "graphrun train: warning: --warmup-steps " << sched.warmup_steps << " is longer than the run ("
              << sched.total_steps << " steps): the learning rate never reaches --lr (its last step's is "
              << runtime::learning_rate(sched, sched.total_steps - 1) << ")" << std::endl;
  if (!eval_only && speaks) note_metadata_frozen(trainer.graphs().forward);
  if (!eval_only && speaks) note_unreached(trainer.graphs(), o.pipeline.freeze);
  if (speaks)
    for (const auto& note : autodiff::colliding_scatter_notes(runtime::fold_constants_on_cpu(trainer.graphs().forward)))
      std::cerr << "graphrun train: note: " << note << std::endl;
  if (speaks && o.pipeline.sync_bn) {
    bool bn = false;
    for (const Node& n : trainer.graphs().forward.nodes) bn = bn || n.op_type == "BatchNormalization";
    if (!bn)
      std::cerr << "graphrun train: warning: --sync-bn changes nothing: '" << trainer.graphs().forward.name
                << "' has no BatchNormalization" << std::endl;
    else if (trainer.total_replicas() == 1)
      std::cerr << "graphrun train: warning: --sync-bn changes nothing on one replica (its shard is the whole batch)"
                << std::endl;
  }
  if (eval_only) {
    trainer.evaluate_only();  // its line on o.log (rank 0's), and --metrics
    finish_profile();
    return 0;
  }
  // From here a Ctrl-C (SIGINT), SIGTERM or, under MPI, SIGUSR1 stops training at a step with a
  // checkpoint instead of killing the process (runtime/interrupt.h).
  runtime::interrupt::arm(speaks);
  try {
    trainer.fit();
  } catch (const runtime::DivergedError& e) {
    finish_profile();
    std::cerr << "graphrun train: error: " << e.what() << std::endl;
    return 3;
  } catch (const runtime::InterruptedError& e) {
    finish_profile();
    if (speaks) std::cerr << "graphrun train: " << e.what() << std::endl;
    return 128 + e.signal;
  }
  finish_profile();
  return 0;
}

}  // namespace graphrun::cli
