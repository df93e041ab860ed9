// replicate: the data-parallel passes run in order, and one copy of their graph per device.
#include "runtime/replicate.h"

#include <algorithm>

#include "graph/passes/bucket_allreduce.h"
#include "graph/passes/state_updates.h"

namespace graphrun::runtime {

std::vector<DeviceGraph> device_copies(const Graph& g, const std::vector<Device>& devices) {
  GR_CHECK(!devices.empty(), "replicate: no devices");
  std::vector<DeviceGraph> result;
  for (const Device& d : devices) {
    DeviceGraph dg;
    dg.device = d;
    dg.graph = g;
    std::string dev = d.str();
    std::replace(dev.begin(), dev.end(), ':', '_');
    dg.graph.name = g.name + "." + dev;
    dg.state_updates = g.state_updates;
    result.push_back(std::move(dg));
  }
  return result;
}

passes::Pipeline replication_passes(const ReplicateOptions& opts) {
  passes::BucketAllReduceOptions bo;
  bo.params = opts.params;
  bo.grad_suffix = opts.grad_suffix;
  bo.bucket_bytes = opts.bucket_bytes;
  passes::AddOptimizerOptions ao;
  ao.optimizer = opts.optimizer;
  ao.lr_input = opts.lr_input;
  ao.step_input = opts.step_input;
  ao.grad_suffix = opts.grad_suffix;
  passes::Pipeline p;
  p.add(passes::bucket_allreduce_pass(bo)).add(passes::add_optimizer_pass(ao)).add(passes::state_updates_pass());
  return p;
}

std::vector<DeviceGraph> replicate(const Graph& training, const ReplicateOptions& opts) {
  GR_CHECK(!opts.devices.empty(), "replicate: no devices");
  return device_copies(replication_passes(opts).run(training), opts.devices);
}

}  // namespace graphrun::runtime
