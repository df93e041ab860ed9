// Training checkpoints: tensors plus metadata in one file, written atomically (temp file, fsync, rename)
// and checked on load (magic, version, CRC32), so a crash mid-write never destroys the last good one.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace graphrun::runtime {

struct Checkpoint {
  std::map<std::string, std::string> meta;  // epoch, step, seed, rng state, model signature, ...
  std::map<std::string, Tensor> tensors;    // weights, optimizer state, running statistics, data order
};

// Writes `path` atomically: a crash at any moment leaves either the old file or the new one.
void save_checkpoint(const std::string& path, const Checkpoint& ck);
// Reads and verifies a checkpoint; a truncated, corrupt or foreign file is an Error naming the path.
Checkpoint load_checkpoint(const std::string& path);
// The same over a file's bytes (`path` names it in errors): sizes are checked against the bytes
// present before anything is allocated, and float tensors must be finite.
Checkpoint parse_checkpoint(const std::string& bytes, const std::string& path);

// Checkpoints in `dir` are named ckpt-<epoch>-<step>.grck; returns the newest complete one, or "".
std::string latest_checkpoint(const std::string& dir);
// The newest checkpoint in `dir` whose bytes verify (load_checkpoint succeeds), or "" when `dir` has
// none: a corrupt newer one is skipped with one warning line on `warn` naming the file and why; when
// every one is corrupt, an Error. --resume uses it.
std::string newest_good_checkpoint(const std::string& dir, std::ostream& warn);
// Refuses (as a corrupt checkpoint) an epoch/step/global step that no run with `steps_per_epoch`
// steps per epoch reaches.
void check_resume_position(const std::string& path, int64_t epoch, int64_t step, int64_t global_step,
                           int64_t steps_per_epoch);
std::string checkpoint_name(int64_t epoch, int64_t step);

// A short fingerprint of a set of named tensor shapes (the model's parameters): a checkpoint from
// another model is refused by comparing it.
std::string shapes_signature(const std::map<std::string, Tensor>& tensors);

}  // namespace graphrun::runtime
