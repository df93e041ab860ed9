// The source tree's layering, read from its #include lines: the communicators of runtime/comm/ build
// without CUDA (nothing there includes runtime/cuda/, the CUDA kernels or a CUDA/NCCL header), and
// no project file includes itself through a chain of others.
// GCC 12's sanitizer builds see a false "may be used uninitialized" inside <regex>'s std::function.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "tests/test_util.h"

namespace graphrun {
namespace {

namespace fs = std::filesystem;

struct Includes {
  std::map<std::string, std::vector<std::string>> project;  // file -> project files it includes
  std::map<std::string, std::vector<std::string>> system;   // file -> <headers> it includes
};

// Every source file of the project (paths relative to the source root) and what it includes.
Includes read_includes() {
  const fs::path root = testing::source_dir();
  const std::regex include_line(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  Includes r;
  for (const char* top : {"graph", "autodiff", "runtime", "tools", "tests", "bench"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh")) continue;
      const std::string file = fs::relative(e.path(), root).generic_string();
      std::ifstream in(e.path());
      std::string line;
      std::smatch m;
      while (std::getline(in, line)) {
        if (!std::regex_search(line, m, include_line)) continue;
        if (m[1] == "\"" && fs::exists(root / m[2].str())) r.project[file].push_back(m[2]);
        else if (m[1] == "<") r.system[file].push_back(m[2]);
      }
    }
  }
  return r;
}

TEST(Layering, CommunicatorsDoNotDependOnCuda) {
  const Includes inc = read_includes();
  int files = 0;
  for (const auto& [file, deps] : inc.project) {
    if (file.rfind("runtime/comm/", 0) != 0) continue;
    ++files;
    for (const std::string& d : deps)
      EXPECT_TRUE(d.rfind("runtime/cuda/", 0) != 0 && d.rfind("runtime/kernels/cuda/", 0) != 0)
          << file << " includes " << d;
  }
  for (const auto& [file, deps] : inc.system) {
    if (file.rfind("runtime/comm/", 0) != 0) continue;
    for (const std::string& d : deps)
      EXPECT_TRUE(d.rfind("cuda", 0) != 0 && d.rfind("nccl", 0) != 0 && d.rfind("cudnn", 0) != 0 &&
                  d.rfind("cublas", 0) != 0)
          << file << " includes <" << d << ">";
  }
  EXPECT_GE(files, 3);  // the test looked at the folder (communicator.h, cpu_comm.*, ...)
}

TEST(Layering, NoIncludeCycles) {
  const Includes inc = read_includes();
  std::map<std::string, int> state;  // 1: on the current path, 2: done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& f) {
    state[f] = 1;
    path.push_back(f);
    auto it = inc.project.find(f);
    if (it != inc.project.end())
      for (const std::string& d : it->second) {
        if (state[d] == 1) {
          std::string cycle;
          for (auto p = std::find(path.begin(), path.end(), d); p != path.end(); ++p) cycle += *p + " -> ";
          ADD_FAILURE() << "include cycle: " << cycle << d;
        } else if (state[d] == 0) {
          visit(d);
        }
      }
    path.pop_back();
    state[f] = 2;
  };
  for (const auto& [file, _] : inc.project)
    if (state[file] == 0) visit(file);
  EXPECT_GT(inc.project.size(), 50u);
}

}  // namespace
}  // namespace graphrun
