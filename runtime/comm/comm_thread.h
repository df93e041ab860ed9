// A replica's communication thread for --overlap-allreduce: started allreduces run on it one at a
// time, in the order they were started (the order every replica and rank shares), while the backward
// pass goes on. In-process replicas (cpu_comm.cc) and MPI ranks (mpi.cc) use it alike.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace graphrun::runtime {

class CommThread {
 public:
  CommThread() = default;
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  ~CommThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Queues `work` (the thread starts on first use) and returns the wait for it, which rethrows what
  // the work threw (as thrown: a ReplicaAborted stays one).
  std::function<void()> submit(std::function<void()> work) {
    auto job = std::make_shared<Job>();
    job->work = std::move(work);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
      queue_.push_back(job);
    }
    cv_.notify_all();
    return [this, job] {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return job->done; });
      if (job->error) std::rethrow_exception(job->error);
    };
  }

  // Waits until every submitted job is done (a blocking collective comes after them).
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty(); });
  }

 private:
  struct Job {
    std::function<void()> work;
    bool done = false;
    std::exception_ptr error;
  };

  // A job leaves the queue only when done, so drain() also waits for the one in progress.
  void serve() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = queue_.front();
      }
      try {
        job->work();
      } catch (...) {
        job->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        job->done = true;
        queue_.pop_front();
      }
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace graphrun::runtime
