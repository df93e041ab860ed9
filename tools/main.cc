// The graphrun command line: dispatches to the subcommands; turns every graphrun::Error into one line and exit 2.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <exception>
#include <mutex>
#include <system_error>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/comm/mpi.h"
#include "runtime/device.h"
#include "runtime/kernels/cpu/gemm.h"
#include "tools/cli.h"

namespace {

const char* kHelp =
    "usage: graphrun <command> [options]\n"
    "\n"
    "graphrun trains neural networks that arrive as ONNX files, data-parallel, on CPU replicas or GPUs.\n"
    "\n"
    "commands:\n"
    "  run    run a model (or a gradient model) on inputs from .npy/.pb files\n"
    "  show   print a model, its backward graph or its per-device graphs (text or Graphviz)\n"
    "  grad   write forward + loss + backward as an ONNX model\n"
    "  train  train a model data-parallel (CPU threads, GPUs, MPI ranks) on Fashion-MNIST or your own data\n"
    "  check  can the model be trained? missing kernels and gradients, a numeric gradient check\n"
    "  plan   FLOPs, memory per replica, AllReduce buckets, predicted step time and scaling at N devices\n"
    "\n"
    "'graphrun <command> --help' describes each command; 'graphrun --version' says what this build has.\n";

// The version and what this build can use: the lines a bug report needs.
void print_version() {
  namespace rt = graphrun::runtime;
  std::cout << "graphrun " << GRAPHRUN_VERSION << "\n"
            << "  CPU GEMM: " << rt::cpu::sgemm_library() << " (" << rt::cpu::sgemm_isa() << " on this CPU); kernels compiled for "
            << rt::cpu::compiled_isa() << "\n";
  std::string why;
  const bool gpu = rt::builtin_cuda_available(&why);
  std::cout << "  CUDA: "
            << (!rt::cuda_backend() ? why : gpu ? "built with CUDA; a device is present" : "built with CUDA; " + why) << "\n"
            << "  MPI: " << (rt::mpi::built_with_mpi() ? "built with MPI (mpirun -np K graphrun train)" : "built without MPI")
            << "\n";
}

// One subcommand; every Error becomes one line and exit 2. Under MPI the line names the rank, only
// rank 0 prints what show, grad and run print, and an error every rank hits is printed once (report_error).
int run_command(const std::string& cmd, const std::vector<std::string>& args) {
  namespace mpi = graphrun::runtime::mpi;
  std::string where;
  try {
    mpi::init();
    if (mpi::active() && mpi::size() > 1) {
      where = "rank " + std::to_string(mpi::rank()) + ": ";
      const bool help = std::find(args.begin(), args.end(), "--help") != args.end() ||
                        std::find(args.begin(), args.end(), "-h") != args.end();
      if (mpi::rank() != 0 && (cmd != "train" || help) && !std::freopen("/dev/null", "w", stdout)) return 1;
    }
    if (cmd == "run") return graphrun::cli::cmd_run(args);
    if (cmd == "show") return graphrun::cli::cmd_show(args);
    if (cmd == "grad") return graphrun::cli::cmd_grad(args);
    if (cmd == "train") return graphrun::cli::cmd_train(args);
    if (cmd == "check") return graphrun::cli::cmd_check(args);
    if (cmd == "plan") return graphrun::cli::cmd_plan(args);
    std::cerr << "graphrun: unknown command '" << cmd << "' (commands: run, show, grad, train, check, plan; see graphrun --help)\n";
    return 2;
  } catch (const graphrun::Error& e) {
    std::cout.flush();
    // Usage errors already start with "graphrun <cmd>: " (Args::usage_error); say it once.
    std::string msg = e.what(), prefix = "graphrun " + cmd + ": ";
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    // Names from a damaged file can hold any bytes: the error stays one printable line.
    for (char& c : msg)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    mpi::report_error("graphrun " + cmd + ": error: " + where + msg);
    return 2;
  } catch (const std::bad_alloc&) {
    mpi::report_error("graphrun " + cmd + ": error: " + where + "out of memory");
    return 2;
  } catch (const std::system_error& e) {
    // A thread that cannot start (EAGAIN): the process or address-space limits, not a graphrun bug.
    if (e.code() != std::errc::resource_unavailable_try_again) {
      mpi::report_error("graphrun " + cmd + ": internal error: " + where + e.what());
      return 1;
    }
    mpi::report_error("graphrun " + cmd + ": error: " + where + "cannot start a thread (" + e.code().message() +
                      "): the machine's limits on processes or memory (ulimit -u, ulimit -v) are reached");
    return 2;
  } catch (const std::exception& e) {
    mpi::report_error("graphrun " + cmd + ": internal error: " + where + e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // "graphrun help train" is "graphrun train --help".
  if (args.size() >= 2 && args[0] == "help") args = {args[1], "--help"};
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kHelp;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    print_version();
    return 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  // A file that reaches the size limit (ulimit -f) is a write error (EFBIG) that the writer reports in one
  // line and cleans up after, not a silent kill that leaves its temporary file behind.
  std::signal(SIGXFSZ, SIG_IGN);
  // glibc finds the unwinder (libgcc_s) the first time an exception crosses C code such as pthread_once;
  // found now, not later under memory pressure, where failing to load it aborts the process ("libgcc_s.so.1
  // must be installed for unwinding to work", seen when oneDNN's first GEMM failed under ulimit -v).
  try {
    static std::once_flag once;
    std::call_once(once, [] { throw 0; });
  } catch (int) {
  }
  int rc = run_command(cmd, args);
  // What was printed must have reached standard output (a full disk, /dev/full): a run whose report was
  // lost does not exit 0.
  std::cout.flush();
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
    const int err = errno;
    std::fprintf(stderr, "graphrun %s: error: cannot write to standard output%s%s\n", cmd.c_str(), err ? ": " : "",
                 err ? std::strerror(err) : "");
    if (rc == 0) rc = 2;
  }
  namespace mpi = graphrun::runtime::mpi;
  // Under MPI a rank that fails takes the job down (the others may be waiting for it in a collective).
  // A stop on request (128 + the signal) is every rank's, agreed: they end together.
  if (rc != 0 && rc < 128 && mpi::active() && mpi::size() > 1) mpi::abort_job(rc);
  mpi::finalize();
  return rc;
}
