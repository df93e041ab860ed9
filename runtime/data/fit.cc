// A source seen through a model's eyes: name matching, dtype conversion, normalisation, target checks.
#include "runtime/data/fit.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

namespace graphrun::runtime::data {

namespace {

bool is_int(DType t) {
  switch (t) {
    case DType::I8: case DType::I16: case DType::I32: case DType::I64:
    case DType::U8: case DType::U16: case DType::U32:
      return true;
    default:
      return false;
  }
}

// How one source array becomes one fed array.
enum class Conv { Copy, U8Unit, Cast };

// The conversion from `from` to `to`, or false when there is none that keeps the values.
bool conversion(DType from, DType to, bool targets, Conv& c) {
  if (from == to) return (c = Conv::Copy), true;
  if (to == DType::F32 && from == DType::U8) return (c = targets ? Conv::Cast : Conv::U8Unit), true;
  if (to == DType::F32 && from == DType::F64) return (c = Conv::Cast), true;
  if (to == DType::F64 && from == DType::F32) return (c = Conv::Cast), true;
  if (to == DType::I64 && is_int(from)) return (c = Conv::Cast), true;
  if (to == DType::F32 && targets && is_int(from)) return (c = Conv::Cast), true;  // small integer targets
  if (to == DType::I32 && (from == DType::I8 || from == DType::I16 || from == DType::U8 || from == DType::U16))
    return (c = Conv::Cast), true;
  return false;
}

template <class T>
double load(const void* p, int64_t i) {
  return static_cast<double>(static_cast<const T*>(p)[i]);
}
double value_at(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::F32: return load<float>(p, i);
    case DType::F64: return load<double>(p, i);
    case DType::I8: return load<int8_t>(p, i);
    case DType::I16: return load<int16_t>(p, i);
    case DType::I32: return load<int32_t>(p, i);
    case DType::I64: return load<int64_t>(p, i);
    case DType::U8: return load<uint8_t>(p, i);
    case DType::U16: return load<uint16_t>(p, i);
    case DType::U32: return load<uint32_t>(p, i);
    default: GR_FAIL("unsupported dtype " << dtype_name(t));
  }
}
// Integers go through int64 (not double) so every i64 value survives.
int64_t int_at(DType t, const void* p, int64_t i) {
  if (t == DType::I64) return static_cast<const int64_t*>(p)[i];
  return static_cast<int64_t>(value_at(t, p, i));
}

void convert(DType from, DType to, Conv c, const void* src, void* dst, int64_t n) {
  if (c == Conv::Copy) return (void)std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(to));
  switch (to) {
    case DType::F32: {
      float* d = static_cast<float*>(dst);
      // Divided, as the MNIST reader does: the same bytes give the same floats, bit for bit.
      if (c == Conv::U8Unit)
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(static_cast<const uint8_t*>(src)[i]) / 255.0f;
      else
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(value_at(from, src, i));
      break;
    }
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) static_cast<double*>(dst)[i] = value_at(from, src, i);
      break;
    case DType::I64:
      for (int64_t i = 0; i < n; ++i) static_cast<int64_t*>(dst)[i] = int_at(from, src, i);
      break;
    case DType::I32:
      for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(int_at(from, src, i));
      break;
    default:
      GR_FAIL("unsupported conversion to " << dtype_name(to));
  }
}

bool dims_match(const Shape& have, const Shape& want) {
  if (have.size() != want.size()) return false;
  for (size_t i = 0; i < have.size(); ++i)
    if (want[i] >= 0 && want[i] != have[i]) return false;
  return true;
}
Shape squeezed(const Shape& s) {
  Shape r;
  for (int64_t d : s)
    if (d != 1) r.push_back(d);
  return r;
}
bool fully_known(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}
std::string want_str(const Shape& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  o << "]";
  return o.str();
}

// Calls f(values, first, n) over array `name` of `src` in chunks of about 1 MB of examples.
void for_each_chunk(const Source& src, const std::string& name,
                    const std::function<void(const Tensor&, int64_t, int64_t)>& f) {
  const ArraySpec& a = src.spec(name);
  const int64_t per = std::max<int64_t>(a.numel(), 1), N = src.size();
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / per);
  std::vector<int64_t> idx;
  Tensor buf(a.dtype, {std::min(chunk, N) * a.numel()});
  for (int64_t first = 0; first < N; first += chunk) {
    const int64_t n = std::min(chunk, N - first);
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = first + i;
    src.read(idx.data(), n, {{name, &buf}});
    f(buf, first, n);
  }
}

std::string names_of(const Source& s) {
  std::ostringstream o;
  for (const auto& a : s.arrays()) o << (o.tellp() ? ", " : "") << a.name;
  return o.str();
}

class FittedSource : public Source {
 public:
  FittedSource(SourcePtr src, const std::vector<InputSpec>& inputs, const FitOptions& opts) : src_(std::move(src)) {
    GR_CHECK(!inputs.empty(), "the model has no inputs to feed");
    int64_t non_targets = 0;
    const ArraySpec* only = nullptr;
    for (const auto& a : src_->arrays())
      if (a.name != opts.labels) ++non_targets, only = &a;
    for (const auto& in : inputs) {
      const ArraySpec* a = src_->find(in.name);
      if (!a && inputs.size() == 1 && non_targets == 1) a = only;
      GR_CHECK(!a || !opts.targets || a->name != opts.labels,
               "--labels " << opts.labels << " names model input '" << in.name << "', which " << src_->describe()
                           << " feeds: the targets are another array (it has: " << names_of(*src_) << ")");
      GR_CHECK(a, src_->describe() << " has no array '" << in.name << "' for model input '"
                                                             << in.name << "' (it has: " << names_of(*src_) << ")");
      add(*a, in.name, in.dtype, in.shape, false, "model input '" + in.name + "'");
    }
    if (!opts.targets) {
      if (!opts.normalize.empty()) set_normalize(opts.normalize, feeds_.size());
      return;
    }
    const ArraySpec* t = src_->find(opts.labels);
    GR_CHECK(t, src_->describe() << " has no array '" << opts.labels << "' of targets (it has: " << names_of(*src_)
                                 << "; name another with --labels NAME)");
    if (opts.label_dtype == DType::I64)
      GR_CHECK(is_int(t->dtype) || t->dtype == DType::I64,
               src_->describe() << " array '" << t->name << "' is " << dtype_name(t->dtype)
                                << (t->dtype == DType::U64 ? ": class ids must be signed or at most 32-bit integers (store them as int64)"
                                                           : ": class ids must be integers (float targets train with --loss mse)"));
    add(*t, kLabels, opts.label_dtype, opts.check_label_shape ? opts.label_shape : t->shape, true, "the targets");
    if (!opts.normalize.empty()) set_normalize(opts.normalize, feeds_.size() - 1);  // (the last feed is the targets)
    check_targets(opts);
  }

  std::string describe() const override { return src_->describe(); }
  int64_t size() const override { return src_->size(); }
  const std::vector<ArraySpec>& arrays() const override { return specs_; }
  bool decode_heavy() const override { return src_->decode_heavy(); }
  std::vector<std::string> classes() const override { return src_->classes(); }

  void read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const override {
    check_read_buffers(*this, n, out);
    // One scratch buffer per converted array and thread: steady-state reads allocate nothing.
    std::vector<std::vector<unsigned char>*> scratch(feeds_.size());
    std::vector<Tensor> views(feeds_.size());
    for (size_t k = 0; k < feeds_.size(); ++k) scratch[k] = &thread_scratch(this, static_cast<int>(k));
    std::map<std::string, Tensor*> want;
    for (size_t k = 0; k < feeds_.size(); ++k) {
      auto it = out.find(specs_[k].name);
      if (it == out.end()) continue;
      const Feed& f = feeds_[k];
      if (f.conv == Conv::Copy) {
        // Same dtype and element count: the source writes straight into the caller's buffer.
        views[k] = Tensor::view(f.from, {n * f.numel}, it->second->raw());
      } else {
        scratch[k]->resize(static_cast<size_t>(n * f.numel) * dtype_size(f.from));
        views[k] = Tensor::view(f.from, {n * f.numel}, scratch[k]->data());
      }
      want[f.source_name] = &views[k];
    }
    src_->read(indices, n, want);
    for (size_t k = 0; k < feeds_.size(); ++k) {
      auto it = out.find(specs_[k].name);
      if (it == out.end()) continue;
      const Feed& f = feeds_[k];
      if (f.conv != Conv::Copy) convert(f.from, specs_[k].dtype, f.conv, scratch[k]->data(), it->second->raw(), n * f.numel);
      if (!f.mean.empty()) normalize(f, it->second->data<float>(), n);
    }
  }

 private:
  struct Feed {
    std::string source_name;
    DType from;
    Conv conv;
    int64_t numel;
    std::vector<float> mean, inv_std;  // per channel, when normalised
    int64_t channels = 0;
  };

  void add(const ArraySpec& a, const std::string& name, DType to, const Shape& want, bool targets,
           const std::string& role) {
    for (const auto& f : feeds_)
      GR_CHECK(f.source_name != a.name, src_->describe() << " array '" << a.name << "' would feed two model inputs");
    Conv c;
    GR_CHECK(conversion(a.dtype, to, targets, c),
             src_->describe() << " array '" << a.name << "' is " << dtype_name(a.dtype) << " but " << role << " is "
                              << dtype_name(to) << " (save it as " << dtype_name(to) << ")");
    Shape shape = a.shape;
    if (!dims_match(a.shape, want)) {
      GR_CHECK(fully_known(want) && squeezed(a.shape) == squeezed(want),
               src_->describe() << " array '" << a.name << "' holds " << dtype_name(a.dtype) << shape_str(a.shape)
                                << " per example but " << role << " takes " << dtype_name(to) << want_str(want));
      shape = want;
    }
    specs_.push_back({name, to, shape});
    feeds_.push_back({a.name, a.dtype, c, shape_numel(shape), {}, {}, 0});
  }

  // On the float inputs among the first `inputs` feeds.
  void set_normalize(const Normalize& nz, size_t inputs) {
    bool any = false;
    for (size_t k = 0; k < inputs; ++k) {
      const ArraySpec& s = specs_[k];
      if (s.dtype != DType::F32 || s.shape.empty()) continue;
      const int64_t C = s.shape[0];
      if (static_cast<int64_t>(nz.mean.size()) != C && nz.mean.size() != 1) continue;
      Feed& f = feeds_[k];
      f.channels = C;
      for (int64_t c = 0; c < C; ++c) {
        f.mean.push_back(nz.mean[nz.mean.size() == 1 ? 0 : c]);
        f.inv_std.push_back(1.0f / nz.std[nz.std.size() == 1 ? 0 : c]);
      }
      any = true;
    }
    GR_CHECK(any, "--normalize gives " << nz.mean.size() << " mean(s) but no float input of the model has that many "
                                       << "channels (the first dimension after N)");
  }

  static void normalize(const Feed& f, float* p, int64_t n) {
    const int64_t plane = f.numel / f.channels;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < f.channels; ++c) {
        float* q = p + i * f.numel + c * plane;
        for (int64_t j = 0; j < plane; ++j) q[j] = (q[j] - f.mean[c]) * f.inv_std[c];
      }
  }

  // One pass over the targets, in chunks, before training: the errors a user can fix in the file.
  void check_targets(const FitOptions& opts) const {
    // An image folder's labels are its class folders: too many for the model is said of the folders,
    // not of the first example of a class past the model's count.
    const std::vector<std::string> classes = src_->classes();
    if (opts.label_dtype == DType::I64 && opts.num_classes > 0 && static_cast<int64_t>(classes.size()) > opts.num_classes) {
      std::string names;
      for (size_t i = 0; i < classes.size() && i < 5; ++i) names += (i ? ", '" : "'") + classes[i] + "'";
      GR_FAIL(src_->describe() << " has " << classes.size() << " class folders (" << names
                               << (classes.size() > 5 ? ", ..." : "") << ") but the model's output scores "
                               << opts.num_classes << " classes: give the model " << classes.size()
                               << " outputs, or keep " << opts.num_classes << " class folders");
    }
    const Feed& f = feeds_.back();
    const ArraySpec& raw = src_->spec(f.source_name);
    const int64_t per = f.numel;
    for_each_chunk(*src_, f.source_name, [&](const Tensor& buf, int64_t first, int64_t n) {
      for (int64_t j = 0; j < n * per; ++j) {
        const int64_t example = first + j / per;
        if (dtype_is_float(raw.dtype)) {
          const double v = value_at(raw.dtype, buf.raw(), j);
          GR_CHECK(std::isfinite(v), src_->describe() << " array '" << f.source_name << "': example " << example
                                                      << " has a non-finite target (" << v << ")");
        } else if (opts.label_dtype == DType::I64) {
          const int64_t v = int_at(raw.dtype, buf.raw(), j);
          GR_CHECK(v >= 0 && (opts.num_classes <= 0 || v < opts.num_classes),
                   src_->describe() << " array '" << f.source_name << "': example " << example << " has class " << v
                                    << (v < 0 ? " (class ids start at 0)"
                                              : ", out of range for a model with " + std::to_string(opts.num_classes) +
                                                    " classes"));
        }
      }
    });
  }

  SourcePtr src_;
  std::vector<ArraySpec> specs_;
  std::vector<Feed> feeds_;  // parallel to specs_; the targets last
};

std::vector<float> parse_floats(const std::string& text, const std::string& whole) {
  std::vector<float> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const float x = std::strtof(item.c_str(), &end);
    GR_CHECK(!item.empty() && end && *end == 0 && std::isfinite(x),
             "--normalize '" << whole << "': '" << item << "' is not a number (MEAN,.../STD,..., e.g. "
                             << "0.485,0.456,0.406/0.229,0.224,0.225)");
    v.push_back(x);
  }
  return v;
}

}  // namespace

Normalize parse_normalize(const std::string& text) {
  Normalize n;
  if (text.empty()) return n;
  const size_t slash = text.find('/');
  GR_CHECK(slash != std::string::npos && text.find('/', slash + 1) == std::string::npos,
           "--normalize '" << text << "': give MEAN,.../STD,... (one mean and std per channel, e.g. "
                           << "0.485,0.456,0.406/0.229,0.224,0.225)");
  n.mean = parse_floats(text.substr(0, slash), text);
  n.std = parse_floats(text.substr(slash + 1), text);
  GR_CHECK(!n.mean.empty() && n.mean.size() == n.std.size(),
           "--normalize '" << text << "': " << n.mean.size() << " means but " << n.std.size() << " stds");
  for (float s : n.std) GR_CHECK(s > 0, "--normalize '" << text << "': a std must be positive");
  return n;
}

int64_t num_classes(const Source& src, const std::string& labels) {
  if (!src.classes().empty()) return static_cast<int64_t>(src.classes().size());
  const ArraySpec& a = src.spec(labels);
  GR_CHECK(is_int(a.dtype), src.describe() << " array '" << labels << "' is " << dtype_name(a.dtype)
                                           << ", not integer class ids");
  int64_t m = -1;
  for_each_chunk(src, labels, [&](const Tensor& buf, int64_t, int64_t n) {
    for (int64_t j = 0; j < n * a.numel(); ++j) m = std::max(m, int_at(a.dtype, buf.raw(), j));
  });
  return m + 1;
}

SourcePtr fit_to_model(SourcePtr src, const std::vector<InputSpec>& inputs, const FitOptions& opts) {
  return std::make_shared<FittedSource>(std::move(src), inputs, opts);
}

}  // namespace graphrun::runtime::data
