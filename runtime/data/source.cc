// The Source interface's shared parts: the MNIST source, subsets and held-out splits, and telling the
// kinds of data apart by what a path points at.
#include "runtime/data/source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/ir.h"

namespace graphrun::runtime::data {

namespace fs = std::filesystem;

const ArraySpec* Source::find(const std::string& name) const {
  for (const auto& a : arrays())
    if (a.name == name) return &a;
  return nullptr;
}

const ArraySpec& Source::spec(const std::string& name) const {
  if (const ArraySpec* a = find(name)) return *a;
  std::ostringstream have;
  for (const auto& a : arrays()) have << (have.tellp() ? ", " : "") << a.name;
  GR_FAIL(describe() << " has no array '" << name << "' (it has: " << have.str() << ")");
}

std::vector<unsigned char>& thread_scratch(const void* owner, int slot) {
  thread_local std::map<std::pair<const void*, int>, std::vector<unsigned char>> buffers;
  return buffers[{owner, slot}];
}

void check_read_buffers(const Source& src, int64_t n, const std::map<std::string, Tensor*>& out) {
  for (const auto& [name, t] : out) {
    const ArraySpec& a = src.spec(name);
    GR_CHECK(t && t->dtype() == a.dtype && t->numel() >= n * a.numel(),
             src.describe() << ": buffer for '" << name << "' does not fit " << n << " examples of "
                            << dtype_name(a.dtype) << shape_str(a.shape));
  }
}

// ---- MNIST folders ----

IdxSource::IdxSource(Dataset ds, std::string origin) : ds_(std::move(ds)), origin_(std::move(origin)) {
  const Shape& s = ds_.images.shape();
  specs_ = {{"image", DType::F32, Shape(s.begin() + 1, s.end())}, {kLabels, DType::I64, {}}};
}

void IdxSource::read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const {
  check_read_buffers(*this, n, out);
  const int64_t per = specs_[0].numel();
  for (const auto& [name, t] : out) {
    if (name == kLabels) {
      const int64_t* src = ds_.labels.data<int64_t>();
      int64_t* dst = t->data<int64_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = src[indices[i]];
    } else {
      const float* src = ds_.images.data<float>();
      float* dst = t->data<float>();
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * per, src + indices[i] * per, per * sizeof(float));
    }
  }
}

SourcePtr open_idx(const std::string& dir, const std::string& prefix) {
  return std::make_shared<IdxSource>(load_split(dir, prefix), "the " + prefix + " split of '" + dir + "'");
}

// ---- subsets and splits ----

Subset::Subset(SourcePtr base, std::vector<int64_t> indices, std::string origin)
    : base_(std::move(base)), indices_(std::move(indices)), origin_(std::move(origin)) {
  for (int64_t i : indices_)
    GR_CHECK(i >= 0 && i < base_->size(), base_->describe() << ": subset index " << i << " out of range");
  // A subset of a subset reads the original directly.
  if (auto* inner = dynamic_cast<const Subset*>(base_.get())) {
    for (int64_t& i : indices_) i = inner->indices_[i];
    base_ = inner->base_;
  }
}

void Subset::read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const {
  std::vector<unsigned char>& buf = thread_scratch(this);
  buf.resize(static_cast<size_t>(n) * sizeof(int64_t));
  auto* mapped = reinterpret_cast<int64_t*>(buf.data());
  for (int64_t i = 0; i < n; ++i) {
    GR_CHECK(indices[i] >= 0 && indices[i] < size(), describe() << ": index " << indices[i] << " out of range");
    mapped[i] = indices_[indices[i]];
  }
  base_->read(mapped, n, out);
}

SourcePtr head(SourcePtr src, int64_t n) {
  if (n >= src->size()) return src;
  std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::string origin = "the first " + std::to_string(n) + " examples of " + src->describe();
  return std::make_shared<Subset>(std::move(src), std::move(idx), std::move(origin));
}

Split split_holdout(SourcePtr src, double fraction, uint64_t seed) {
  GR_CHECK(fraction > 0 && fraction < 1, "--val-split " << fraction << ": give a fraction between 0 and 1");
  const int64_t n = src->size();
  int64_t k = std::max<int64_t>(1, std::llround(fraction * static_cast<double>(n)));
  GR_CHECK(k < n, "--val-split " << fraction << " leaves no training data from " << src->describe() << " ("
                                 << n << " examples)");
  // Its own stream (not an epoch's): the split stays put whatever the epoch orders are.
  std::vector<int64_t> perm = epoch_order(n, seed ^ 0x76616c2d73706c74ull, 0);
  std::vector<int64_t> held(perm.begin(), perm.begin() + k), train(perm.begin() + k, perm.end());
  std::sort(held.begin(), held.end());
  std::sort(train.begin(), train.end());
  std::ostringstream pct;
  pct << fraction * 100 << "%";
  Split s;
  s.held_out = std::make_shared<Subset>(src, std::move(held), pct.str() + " of " + src->describe() + " held out");
  s.train = std::make_shared<Subset>(src, std::move(train), "the rest of " + src->describe());
  return s;
}

// ---- telling sources apart ----

bool has_idx(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  const std::string stem = (fs::path(dir) / (prefix + "-images-idx3-ubyte")).string();
  return fs::exists(stem, ec) || fs::exists(stem + ".gz", ec);
}

namespace {

std::string lower_ext(const fs::path& p) {
  std::string e = p.extension().string();
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

bool image_ext(const std::string& e) {  // the extensions torchvision's ImageFolder takes
  for (const char* x : {".png", ".jpg", ".jpeg", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})
    if (e == x) return true;
  return false;
}

// Whether folder `dir` holds an image file, at any depth (hidden names skipped, as the image folder
// skips them); the walk stops at the first.
bool holds_images(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (hidden(it->path())) {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code is_file;
    if (it->is_regular_file(is_file) && image_ext(lower_ext(it->path()))) return true;
  }
  return false;
}

bool starts_with_zip_magic(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char m[4] = {};
  f.read(m, 4);
  return f.gcount() == 4 && m[0] == 'P' && m[1] == 'K' && ((m[2] == 3 && m[3] == 4) || (m[2] == 5 && m[3] == 6));
}

}  // namespace

std::string source_kind(const std::string& path) {
  std::error_code ec;
  GR_CHECK(fs::exists(path, ec), "data '" << path << "' does not exist");
  if (fs::is_regular_file(path, ec)) {
    const std::string ext = lower_ext(path);
    if (ext == ".npz" || starts_with_zip_magic(path)) return "npz";
    if (ext == ".csv" || ext == ".tsv") return "csv";
    if (ext == ".npy")
      GR_FAIL("data '" << path << "' is a single .npy array; put it in a folder beside labels.npy (one .npy per "
                          "array), or save them together with numpy.savez");
    GR_FAIL("data '" << path << "' is neither an .npz file nor a folder (MNIST files, .npy files or class folders)");
  }
  GR_CHECK(fs::is_directory(path, ec), "data '" << path << "' is neither a file nor a folder");
  if (has_idx(path, "train") || has_idx(path, "t10k")) return "idx";
  std::vector<std::string> npys;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    std::error_code kind;
    if (hidden(e.path())) continue;
    if (e.is_regular_file(kind) && lower_ext(e.path()) == ".npy") npys.push_back(e.path().filename().string());
    if (e.is_directory(kind)) dirs.push_back(e.path());
  }
  if (npys.empty() && !dirs.empty()) return "image-folder";
  if (!npys.empty()) {
    // Class folders of images beside .npy files: an image folder with loose files at its root (a
    // mean.npy of its statistics), unless the .npy files are a data set of their own (labels.npy).
    std::vector<std::string> image_dirs;
    for (const auto& d : dirs)
      if (holds_images(d)) image_dirs.push_back(d.filename().string() + "/");
    if (image_dirs.empty()) return "npy-folder";
    std::sort(npys.begin(), npys.end());
    std::sort(image_dirs.begin(), image_dirs.end());
    if (std::find(npys.begin(), npys.end(), std::string(kLabels) + ".npy") == npys.end()) return "image-folder";
    auto some = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 3; ++i) s += (i ? ", " : "") + v[i];
      return v.size() > 3 ? s + ", ..." : s;
    };
    GR_FAIL("data folder '" << path << "' reads two ways: as .npy arrays (" << some(npys) << ") and as class folders of images ("
                            << some(image_dirs) << "); move one of them elsewhere");
  }
  GR_FAIL("data folder '" << path << "' holds no MNIST-format files (train-images-idx3-ubyte[.gz], ...), no .npy "
                               "files and no class folders");
}

SourcePtr open_source(const std::string& path, const OpenOptions& opts) {
  const std::string kind = source_kind(path);
  if (kind == "idx") {
    std::string prefix = opts.idx_prefix;
    if (!has_idx(path, prefix)) prefix = has_idx(path, "train") ? "train" : "t10k";
    return open_idx(path, prefix);
  }
  if (kind == "npz") return open_npz(path);
  if (kind == "csv") return open_csv(path, opts);
  if (kind == "npy-folder") return open_npy_folder(path);
  return open_image_folder(path, opts.channels, opts.height, opts.width);
}

void check_same_classes(const std::vector<std::string>& want, const std::string& want_from, const Source& got,
                        const std::string& got_path) {
  std::vector<std::string> a = want, b = got.classes();
  if (a == b) return;
  // The differences, a few of each side.
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::vector<std::string> only_a, only_b;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_a));
  std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_b));
  auto list = [](const std::vector<std::string>& v, const std::string& where) {
    if (v.empty()) return std::string();
    std::string s;
    for (size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", '" : "'") + printable(v[i]) + "'";
    if (v.size() > 5) s += " and " + std::to_string(v.size() - 5) + " more";
    return s + " only in " + where;
  };
  const std::string x = list(only_b, got.describe()), y = list(only_a, want_from);
  GR_FAIL("the class " << (source_kind(got_path) == "csv" ? "names" : "folders") << " of " << got.describe()
                       << " differ from those of " << want_from << ": " << x << (x.empty() || y.empty() ? "" : "; ")
                       << y << " (the same classes, by name, are needed for labels to agree)");
}

std::string classes_json(const std::vector<std::string>& classes) { return nlohmann::json(classes).dump(); }

std::vector<std::string> classes_from_json(const std::string& text, const std::string& what) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    std::vector<std::string> v = j.get<std::vector<std::string>>();
    GR_CHECK(!v.empty(), what << " lists no class");
    return v;
  } catch (const nlohmann::json::exception&) {
    GR_FAIL(what << " is not a JSON list of class names");
  }
}

DataSplits open_splits(const std::string& data_path, const std::string& test_path, double val_split, uint64_t seed,
                       const OpenOptions& opts, const std::function<SourcePtr(SourcePtr)>& fit) {
  auto fitted = [&](SourcePtr s) { return fit ? fit(std::move(s)) : s; };
  DataSplits d;
  OpenOptions train_opts = opts, test_opts = opts;
  train_opts.idx_prefix = "train";
  test_opts.idx_prefix = "t10k";
  d.train = fitted(open_source(data_path, train_opts));
  if (!test_path.empty()) {
    GR_CHECK(val_split < 0, "--val-split and --test-data both name test data: give one of them");
    test_opts.classes = d.train->classes();  // a test table numbers its class names as the training table
    d.test = fitted(open_source(test_path, test_opts));
    d.test_from = d.test->describe();
    check_same_classes(d.train->classes(), d.train->describe(), *d.test, test_path);
    return d;
  }
  if (val_split < 0 && source_kind(data_path) == "idx" && has_idx(data_path, "t10k") &&
      has_idx(data_path, "train")) {
    d.test = fitted(open_idx(data_path, "t10k"));
    d.test_from = d.test->describe();
    return d;
  }
  Split s = split_holdout(d.train, val_split < 0 ? 0.1 : val_split, seed);
  d.train = s.train;
  d.test = s.held_out;
  d.test_from = s.held_out->describe() + " (seed " + std::to_string(seed) + ")";
  return d;
}

}  // namespace graphrun::runtime::data
