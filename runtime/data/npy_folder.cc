// A folder of .npy files as a Source: each file memory-mapped, so data larger than memory trains and
// resident memory stays bounded (past kResidentLimit, the pages of each read are released after it).
#include <algorithm>
#include <filesystem>

#include "runtime/data/array_set.h"

namespace graphrun::runtime::data {

namespace {

class NpyFolderSource : public ArraySetSource {
 public:
  explicit NpyFolderSource(const std::string& dir) : ArraySetSource(dir) {
    namespace fs = std::filesystem;
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".npy" && e.is_regular_file(ec)) files.push_back(e.path());
    GR_CHECK(!ec, "cannot list data folder '" << dir << "': " << ec.message());
    std::sort(files.begin(), files.end());
    GR_CHECK(!files.empty(), "data folder '" << dir << "' holds no .npy files");
    size_t total = 0;
    for (const auto& p : files) {
      auto m = std::make_unique<MappedFile>(p.string());
      const std::string origin = "'" + p.string() + "'";
      NpyHeader h = parse_npy_header(m->data(), m->size(), m->size(), origin);
      add(p.stem().string(), origin, h, m->data() + h.data_offset);
      total += m->size();
      maps_.push_back(std::move(m));
    }
    finish();
    release_ = total > kResidentLimit;
  }

 protected:
  void copied(size_t array, const unsigned char* p, size_t n) const override {
    if (release_) maps_[array]->release(p, n);
  }

 private:
  std::vector<std::unique_ptr<MappedFile>> maps_;  // parallel to arrays_
  bool release_ = false;
};

}  // namespace

SourcePtr open_npy_folder(const std::string& dir) { return std::make_shared<NpyFolderSource>(dir); }

}  // namespace graphrun::runtime::data
