// graphrun plan: what a data-parallel training run of a model would cost, on paper: FLOPs, memory
// per replica, AllReduce buckets, and the predicted step time and scaling at N devices.
#include <algorithm>
#include <iostream>
#include <thread>

#include "graph/onnx_io.h"
#include "runtime/plan.h"
#include "runtime/trainer.h"
#include "tools/backward_options.h"
#include "tools/cli.h"
#include "tools/optimizer_options.h"

namespace graphrun::cli {

namespace {

std::vector<Option> plan_options() {
  std::vector<Option> r = {
      {"devices", "N|LIST", "the replicas to plan for: N, cpu:N or a list as graphrun train takes (default 1);\n"
                            "                            cpu:auto: time each split of the cores into replicas x threads\n"
                            "                            (as train --devices cpu:auto), then plan the fastest"},
      {"gpus", "N", "plan for N GPUs (on paper: none need be here; the link defaults to nvlink)"},
      {"link", "KIND", "nvlink, pcie, ib, ethernet, shm (in-process CPU replicas), or a bandwidth in GB/s\n"
                       "                            (default: shm for cpu devices, nvlink for GPUs; README: graphrun plan);\n"
                       "                            with shm the N replicas are timed running at once on this\n"
                       "                            machine, sharing its cores as graphrun train's replicas do"},
      {"device-tflops", "X", "model each node as FLOPs / X TFLOP/s + --kernel-us instead of timing the replica\n"
                             "                            on this machine's CPU"},
      {"kernel-us", "US", "with --device-tflops: fixed cost of each node (launch, memory-bound ops; default 5)"},
      {"batch-size", "B", "global batch, split over the replicas as graphrun train splits it (default 256)"},
      {"dims", "NAME=SIZE,...", "sizes of the inputs' symbolic dimensions other than the batch (a sequence\n"
                                "                            length: --dims T=128); the leading one is the replica's shard"},
      {"bucket-mb", "MB", "gradients per AllReduce node, in MB (default 4), as graphrun train"},
      {"overlap-allreduce", "on|off", "an AllReduce runs while the backward pass goes on (default as graphrun\n"
                                      "                            train: on for GPUs, off for CPU replicas)"},
      {"threads", "N", "intra-op threads of the timed replica (default as graphrun train: cores / replicas)"},
      {"steps", "K", "timed steps per measurement, after one planning step (default 3)"},
      {"loss", "KIND", "cross-entropy (default), mse or output, as graphrun train"},
      label_smoothing_option(),
      {"freeze", "NAMES", "parameters that are not trained, as graphrun train: no gradient, no bucket, no\n"
                          "                            optimizer state (comma-separated or repeated); a module name\n"
                          "                            (fc1) freezes its parameters (fc1.weight, fc1.bias)", true},
      sync_bn_option(),
      {"json", "", "print the plan as one JSON object"},
  };
  // The plan always has the optimizer: grad/show's "with --devices: " does not apply.
  for (Option o : optimizer_options()) {
    const std::string with = "with --devices: ";
    if (o.help.rfind(with, 0) == 0) o.help = o.help.substr(with.size());
    r.push_back(o);
  }
  return r;
}

const Command& plan_command() {
  static const Command cmd{
      "plan",
      "graphrun plan MODEL.onnx [--devices N | --gpus N] [--link nvlink|pcie|ib|ethernet|shm|GBPS] [options]",
      "Plans data-parallel training of a model without training it: the replica graph graphrun train would run\n"
      "is built and run once on this machine's CPU for its memory plan and FLOPs; then a step at N devices is\n"
      "predicted from the node times (timed here, or FLOPs / --device-tflops) and a ring-allreduce model of the\n"
      "buckets: 2(p-1) messages of latency L, and 2(p-1)/p x bytes at the link's bandwidth, each bucket starting\n"
      "when its last gradient exists (with overlap) and the buckets sharing one link in order. With --sync-bn\n"
      "each ReplicaSum node (BatchNorm's statistics and their gradients) is a blocking ring allreduce on that link.",
      plan_options(),
      "Printed: FLOPs per step (Conv, ConvGrad, Gemm, MatMul; other ops are not counted), memory per replica\n"
      "(the executor's activations arena, parameters, optimizer state, other state), the buckets, and the\n"
      "predicted step, speedup over one device on the whole batch, and scaling efficiency (speedup / N).\n"
      "Timed figures come from this machine, which may be loaded: they vary from run to run. The shard (and,\n"
      "when timed, one device's whole batch) must fit in 90% of this machine's available memory: a larger\n"
      "--batch-size is refused in one line.\n"
      "\n"
      "examples:\n"
      "  graphrun plan models/lenet.onnx --devices cpu:2\n"
      "  graphrun plan resnet18.onnx --gpus 64 --link ib --device-tflops 100\n"
      "  graphrun plan resnet18.onnx --gpus 64 --link ib --device-tflops 100 --sync-bn\n"
      "  graphrun plan models/lenet.onnx --devices 8 --link ethernet --device-tflops 10 --json\n"
      "  graphrun plan tokens.onnx --devices cpu:2 --dims T=128    # input tokens[N, T]: N is the shard"};
  return cmd;
}

}  // namespace

int cmd_plan(const std::vector<std::string>& argv) {
  const Command& cmd = plan_command();
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
  runtime::PlanOptions o;
  if (args.has("gpus") && args.has("devices")) throw bad("give --gpus or --devices, not both");
  bool gpus = false;
  const bool auto_placement = args.has("devices") && args.get("devices") == "cpu:auto";
  if (args.has("gpus")) {
    const int64_t n = args.get_int("gpus", 0);
    if (n < 1 || n > 100000) throw bad("--gpus must be between 1 and 100000, got " + args.get("gpus"));
    o.devices = static_cast<int>(n);
    gpus = true;
  } else if (auto_placement) {
    if (args.has("threads")) throw bad("--devices cpu:auto chooses the threads: give --threads with cpu:N instead");
    if (args.has("link") || args.has("device-tflops"))
      throw bad("--devices cpu:auto times in-process replicas on this machine: it takes no --link or --device-tflops");
  } else if (args.has("devices")) {
    std::vector<Device> ds;
    try {
      ds = runtime::parse_devices(args.get("devices"));
    } catch (const Error& e) {
      throw bad(std::string("--devices: ") + e.what());
    }
    o.devices = static_cast<int>(ds.size());
    gpus = !ds.empty() && !ds[0].is_cpu();
  }
  try {
    o.link = runtime::parse_link(args.get("link", gpus ? "nvlink" : "shm"));
  } catch (const Error& e) {
    throw bad(e.what());
  }
  o.device_tflops = args.get_double("device-tflops", 0);
  if (args.has("device-tflops") && !(o.device_tflops >= 1e-6 && o.device_tflops <= 1e9))
    throw bad("--device-tflops must be between 1e-06 and 1e9 (TFLOP/s), got " + args.get("device-tflops"));
  o.kernel_us = args.get_double("kernel-us", 5);
  if (!(o.kernel_us >= 0 && o.kernel_us < 1e9)) throw bad("--kernel-us must be >= 0, got " + args.get("kernel-us"));
  if (args.has("kernel-us") && !args.has("device-tflops")) throw bad("--kernel-us needs --device-tflops");
  o.batch_size = args.get_int("batch-size", 256);
  if (o.batch_size < 1) throw bad("--batch-size must be at least 1, got " + args.get("batch-size"));
  o.dims = parse_dims(args);
  if (o.batch_size < o.devices)
    throw bad("--batch-size " + std::to_string(o.batch_size) + " is smaller than the number of replicas (" +
              std::to_string(o.devices) + ")");
  if (args.has("bucket-mb")) {
    const double m = args.get_double("bucket-mb", 4);
    if (!(m > 0 && m <= 1e6)) throw bad("--bucket-mb must be a positive number, got " + args.get("bucket-mb"));
    o.pipeline.bucket_bytes = std::max<size_t>(1, static_cast<size_t>(m * (1 << 20)));
  }
  o.overlap = gpus;
  if (args.has("overlap-allreduce")) {
    const std::string v = args.get("overlap-allreduce");
    if (v != "on" && v != "off") throw bad("--overlap-allreduce takes on or off, got '" + v + "'");
    o.overlap = v == "on";
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.threads = gpus ? cores : std::max(1, cores / o.devices);
  if (args.has("threads")) {
    const int64_t t = args.get_int("threads", 1);
    if (t < 1 || t > 1024) throw bad("--threads must be between 1 and 1024, got " + args.get("threads"));
    o.threads = static_cast<int>(t);
  }
  const int64_t steps = args.get_int("steps", 3);
  if (steps < 1 || steps > 1000) throw bad("--steps must be between 1 and 1000, got " + args.get("steps"));
  o.measure_steps = static_cast<int>(steps);
  o.pipeline.loss = parse_loss(args);
  o.pipeline.label_smoothing = parse_label_smoothing(args, o.pipeline.loss);
  o.pipeline.optimizer = parse_optimizer_options(args, true);
  for (const auto& f : args.all("freeze")) o.pipeline.freeze.insert(f);
  o.pipeline.sync_bn = args.has("sync-bn");
  // In-process CPU replicas share this machine's cores: timed running at once, as train runs them.
  if (!gpus && o.link.name == "shm") o.concurrent = o.devices;

  const Graph model = load_onnx_for_training(args.positional()[0]);
  check_dims_known(args, o.dims, model, true);
  if (auto_placement) {  // time each split of the cores (as train --devices cpu:auto), then plan the fastest
    const auto ranked = runtime::compare_cpu_placements(model, o, cores);
    o.devices = o.concurrent = ranked.at(0).replicas;
    o.threads = ranked[0].threads;
    o.link = runtime::parse_link("shm");
    if (!args.has("json")) std::cout << runtime::describe_placements(ranked) << "\n\n";
  }
  const runtime::Plan plan = runtime::make_plan(model, o);
  if (args.has("json")) std::cout << runtime::plan_json(plan) << std::endl;
  else runtime::print_plan(std::cout, plan);
  return 0;
}

}  // namespace graphrun::cli
