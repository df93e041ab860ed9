// The prefetching loader: a ring of batch buffers, filled by worker threads in claim order and handed
// to the consumer strictly in sequence; and the seeded crop-and-flip augmentation.
#include "runtime/data/loader.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace graphrun::runtime::data {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a well-spread hash of a 64-bit key
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool is_image(const ArraySpec& s) { return s.dtype == DType::F32 && s.shape.size() == 3; }

}  // namespace

Tensor Batch::slice(const std::string& name, int64_t begin, int64_t count) const {
  auto it = arrays.find(name);
  GR_CHECK(it != arrays.end(), "batch has no array '" << name << "'");
  const Tensor& t = it->second;
  GR_CHECK(begin >= 0 && count >= 0 && begin + count <= size, "batch slice out of range");
  Shape s = t.shape();
  const size_t per = t.nbytes() / static_cast<size_t>(s[0]);
  s[0] = count;
  auto* base = static_cast<unsigned char*>(const_cast<void*>(t.raw()));
  return Tensor::view(t.dtype(), s, base + begin * per);
}

AugmentDraw augment_draw(uint64_t seed, int64_t epoch, int64_t example, int64_t pad) {
  uint64_t h = mix(mix(mix(seed ^ 0x617567ull) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(example));
  const uint64_t span = static_cast<uint64_t>(2 * pad + 1);
  return {static_cast<int64_t>((h & 0xFFFF) % span), static_cast<int64_t>(((h >> 16) & 0xFFFF) % span),
          ((h >> 32) & 1) != 0};
}

void augment_image(float* img, int64_t C, int64_t H, int64_t W, int64_t pad, const std::vector<float>& fill,
                   const AugmentDraw& d, float* scratch) {
  // Output (y, x) is the padded image at (y + dy, x + dx), i.e. the input at (y + dy - pad, x + dx - pad),
  // read mirrored in x when flipped.
  for (int64_t c = 0; c < C; ++c) {
    const float f = fill.empty() ? 0.f : fill[fill.size() == 1 ? 0 : c];
    const float* src = img + c * H * W;
    float* dst = scratch + c * H * W;
    for (int64_t y = 0; y < H; ++y) {
      const int64_t sy = y + d.dy - pad;
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sx = (d.flip ? W - 1 - x : x) + d.dx - pad;
        dst[y * W + x] = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? src[sy * W + sx] : f;
      }
    }
  }
  std::memcpy(img, scratch, static_cast<size_t>(C * H * W) * sizeof(float));
}

Loader::Loader(SourcePtr src, LoaderOptions opts) : src_(std::move(src)), opts_(std::move(opts)) {
  GR_CHECK(opts_.batch > 0, "loader: batch size must be positive");
  GR_CHECK(opts_.threads >= 0 && opts_.threads <= 256, "--loader-threads " << opts_.threads << ": give 0 to 256");
  const int64_t n = src_->size();
  GR_CHECK(n > 0, src_->describe() << " holds no examples");
  steps_ = (n + opts_.batch - 1) / opts_.batch;
  GR_CHECK(opts_.steps_per_epoch >= 0, "loader: negative steps per epoch");
  GR_CHECK(opts_.shard_count >= 1 && opts_.shard_rank >= 0 && opts_.shard_rank < opts_.shard_count,
           "loader: shard " << opts_.shard_rank << " of " << opts_.shard_count);
  if (opts_.steps_per_epoch > 0) steps_ = std::min(steps_, opts_.steps_per_epoch);
  if (opts_.arrays.empty())
    specs_ = src_->arrays();
  else
    for (const auto& name : opts_.arrays) specs_.push_back(src_->spec(name));
  const int prefetch = opts_.prefetch > 0 ? opts_.prefetch : std::max(2, 2 * opts_.threads);
  slots_.resize(opts_.threads > 0 ? prefetch + 1 : 1);
  for (auto& s : slots_) {
    s.batch.indices.resize(static_cast<size_t>(opts_.batch));
    for (const auto& a : specs_) {
      Shape shape{opts_.batch};
      shape.insert(shape.end(), a.shape.begin(), a.shape.end());
      s.batch.arrays.emplace(a.name, Tensor(a.dtype, shape));
    }
  }
}

Loader::~Loader() { stop_workers(); }

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  stop_ = false;
}

std::shared_ptr<const std::vector<int64_t>> Loader::order_of(int64_t epoch) {
  // Called with mu_ held. Orders of epochs no batch can still come from are dropped.
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  const int64_t n = src_->size();
  std::vector<int64_t> order;
  if (opts_.shuffle) {
    order = epoch_order(n, opts_.seed, epoch);
  } else {
    order.resize(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
  }
  auto p = std::make_shared<const std::vector<int64_t>>(std::move(order));
  orders_[epoch] = p;
  const int64_t oldest = (first_ + released_) / steps_;
  while (!orders_.empty() && orders_.begin()->first < oldest) orders_.erase(orders_.begin());
  return p;
}

void Loader::fill(Slot& slot, int64_t seq) {
  const int64_t g = first_ + seq, epoch = g / steps_, step = g % steps_;
  std::shared_ptr<const std::vector<int64_t>> order;
  {
    std::lock_guard<std::mutex> lock(mu_);
    order = order_of(epoch);
  }
  Batch& b = slot.batch;
  b.epoch = epoch;
  b.step = step;
  int64_t begin = step * opts_.batch;
  b.size = std::min(opts_.batch, src_->size() - begin);
  if (opts_.shard_count > 1) {
    const Shards sh = shard(b.size, opts_.shard_count);
    begin += sh.begin[opts_.shard_rank];
    b.size = sh.size[opts_.shard_rank];
  }
  std::copy(order->begin() + begin, order->begin() + begin + b.size, b.indices.begin());
  slot.error = nullptr;
  try {
    std::map<std::string, Tensor*> out;
    for (auto& [name, t] : b.arrays) out[name] = &t;
    src_->read(b.indices.data(), b.size, out);
    if (opts_.augment) {
      thread_local std::vector<float> scratch;
      for (const auto& a : specs_) {
        if (!is_image(a)) continue;
        const int64_t C = a.shape[0], H = a.shape[1], W = a.shape[2];
        scratch.resize(static_cast<size_t>(C * H * W));
        float* p = b.arrays.at(a.name).data<float>();
        for (int64_t i = 0; i < b.size; ++i)
          augment_image(p + i * C * H * W, C, H, W, opts_.pad, opts_.fill,
                        augment_draw(opts_.seed, epoch, b.indices[i], opts_.pad), scratch.data());
      }
    }
  } catch (...) {
    slot.error = std::current_exception();
  }
}

void Loader::worker() {
  const int64_t depth = static_cast<int64_t>(slots_.size());
  for (;;) {
    int64_t seq;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A slot is free once the batch `depth` before it has been released by the consumer.
      cv_.wait(lock, [&] { return stop_ || claimed_ < released_ + depth; });
      if (stop_) return;
      seq = claimed_++;
    }
    Slot& slot = slots_[seq % depth];
    fill(slot, seq);
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot.ready = seq;
    }
    cv_.notify_all();
  }
}

void Loader::start(int64_t epoch, int64_t step) {
  GR_CHECK(epoch >= 0 && step >= 0 && step < steps_, "loader: no batch " << step << " in an epoch of " << steps_);
  stop_workers();
  first_ = epoch * steps_ + step;
  claimed_ = released_ = 0;
  current_ = -1;
  orders_.clear();
  for (auto& s : slots_) s.ready = -1;
  for (int t = 0; t < opts_.threads; ++t) threads_.emplace_back([this] { worker(); });
}

const Batch& Loader::next() {
  const int64_t depth = static_cast<int64_t>(slots_.size());
  if (threads_.empty()) {
    // Synchronous: the same batches as the threaded path, read here.
    const int64_t seq = ++current_;
    released_ = seq;
    fill(slots_[0], seq);
    slots_[0].ready = seq;
    if (slots_[0].error) std::rethrow_exception(slots_[0].error);
    return slots_[0].batch;
  }
  Slot* slot;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (current_ >= 0) released_ = current_ + 1;
    const int64_t seq = ++current_;
    slot = &slots_[seq % depth];
    cv_.notify_all();
    if (slot->ready != seq) {
      const auto t0 = std::chrono::steady_clock::now();
      cv_.wait(lock, [&] { return slot->ready == seq; });
      wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  if (slot->error) std::rethrow_exception(slot->error);
  return slot->batch;
}

void verify_all(SourcePtr src, int threads, int64_t batch) {
  LoaderOptions o;
  o.batch = batch;
  o.threads = threads;
  o.shuffle = false;
  Loader loader(src, o);
  loader.start(0);
  for (int64_t s = 0; s < loader.steps_per_epoch(); ++s) loader.next();
}

}  // namespace graphrun::runtime::data
