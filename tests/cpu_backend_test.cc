// The CPU as a DeviceBackend: it is backend_for(CPU), serves the CPU kernel table, copies and reads
// back synchronously, and its communicators reduce across replicas' threads and can be aborted.
#include <gtest/gtest.h>

#include <thread>

#include "runtime/comm/communicator.h"
#include "runtime/device.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using runtime::DeviceBackend;

TEST(CpuBackend, IsTheCpusBackendWithTheCpuKernels) {
  DeviceBackend* b = runtime::backend_for(Device::Kind::CPU);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b, runtime::cpu_backend());
  EXPECT_EQ(b->kind(), Device::Kind::CPU);
  EXPECT_EQ(&b->kernels(), &runtime::cpu_kernels());
  std::string why = "unset";
  EXPECT_TRUE(runtime::backend_available(Device::Kind::CPU, &why));
  EXPECT_EQ(why, "");
  EXPECT_GE(b->device_count(), 256) << "CPU devices are logical, one per replica";
  EXPECT_FALSE(b->overlap_allreduce_by_default());
  EXPECT_THROW(runtime::override_backend(Device::Kind::CPU, b), Error);
}

TEST(CpuBackend, MemoryIsTheHostsAndReadbackIsSynchronous) {
  DeviceBackend* b = runtime::cpu_backend();
  const Device cpu1{Device::Kind::CPU, 1};
  EXPECT_TRUE(runtime::shares_memory(cpu1, Device{}));
  EXPECT_FALSE(runtime::shares_memory(Device{Device::Kind::CUDA, 0}, Device{}));
  Tensor t = b->empty(cpu1, DType::F32, {3, 5});
  EXPECT_EQ(t.device(), cpu1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], 0.f);  // zeroed, as host tensors are
  Tensor h = testing::random_tensor({3, 5}, 1);
  b->copy_host_to_device(cpu1, t.raw(), h.raw(), h.nbytes());
  EXPECT_EQ(testing::max_abs_diff(runtime::to_host(t), h), 0);
  EXPECT_EQ(runtime::host_readable(t).raw(), t.raw()) << "host memory needs no copy";

  runtime::HostReadback rb(b, cpu1, 2, 2);
  const Tensor a = Tensor::scalar<float>(1.5f), c = Tensor::scalar<float>(-2.f);
  rb.post(1, {&a, &c});
  const float* row = rb.read(1);
  EXPECT_EQ(row[0], 1.5f);
  EXPECT_EQ(row[1], -2.f);
  const Tensor wrong = Tensor::scalar<int64_t>(3);
  EXPECT_THROW(rb.post(0, {&a, &wrong}), Error);
}

TEST(CpuBackend, CommunicatorsSumAcrossThreadsAndAbortReleasesWaiters) {
  auto comms = runtime::cpu_backend()->make_communicators({Device{}, Device{Device::Kind::CPU, 1}, Device{Device::Kind::CPU, 2}});
  ASSERT_EQ(comms.size(), 3u);
  float x[3][2] = {{1, 2}, {10, 20}, {100, 200}};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) ranks.emplace_back([&, r] { comms[r]->allreduce_sum(x[r], 2); });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->size(), 3);
    EXPECT_EQ(x[r][0], 111.f);
    EXPECT_EQ(x[r][1], 222.f);
  }
  // Two ranks wait in a reduction the third never joins: aborting through it releases them.
  std::string errors[2];
  ranks.clear();
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        comms[r]->allreduce_sum(x[r], 2);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  comms[2]->abort();
  for (auto& t : ranks) t.join();
  for (const std::string& e : errors) EXPECT_FALSE(e.empty());
}

}  // namespace
}  // namespace graphrun
