// Command-line plumbing shared by the graphrun subcommands: option tables, parsing (on CLI11), help text.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"

namespace graphrun::cli {

struct Option {
  std::string name;       // "lr" for --lr; "output" also answers to -o
  std::string value;      // "" for a switch; else the metavariable shown in help ("RATE")
  std::string help;       // lines after the first may be indented to the help column or not
  bool repeatable = false;
};

struct Command {
  std::string name;       // "train"
  std::string usage;      // "graphrun train MODEL.onnx [options]"
  std::string summary;    // one line
  std::vector<Option> options;
  std::string details;    // extra help text after the options
  std::string help() const;
};

// Parsed arguments (split by CLI11). Accepts --flag VALUE and --flag=VALUE; what follows "--" is
// positional. Unknown flags, a value option without its value (at the end, or followed by another
// option), a switch given a value and a repeated non-repeatable flag are usage errors
// (graphrun::Error, exit 2). With --help or -h anywhere, help() is true and nothing else is checked.
class Args {
 public:
  Args(const Command& cmd, const std::vector<std::string>& argv);
  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> all(const std::string& name) const;  // repeatable; comma-separated lists split
  std::vector<std::string> given(const std::string& name) const;  // repeatable; each value as given, unsplit
  int64_t get_int(const std::string& name, int64_t def) const;      // checks it is an integer
  double get_double(const std::string& name, double def) const;    // checks it is a number
  const std::vector<std::string>& positional() const { return positional_; }
  std::string usage_error(const std::string& msg) const;  // "graphrun train: msg (see graphrun train --help)"

 private:
  const Command& cmd_;
  bool help_ = false;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// An output file a command will write at its end (--save, --metrics, --profile, -o): checked when the
// command starts, without changing the file, so that a long run does not fail at its end. Error
// (exit 2): "--save nodir/x.onnx: cannot write there: No such file or directory (directory 'nodir')".
void check_output_path(const std::string& flag, const std::string& path);
// graphrun train's --checkpoint-dir, before anything trains: created if missing and written to once (a
// folder where checkpoints cannot be written fails now, not after the first epoch); a fresh run (not
// --resume) into a folder that holds checkpoints is refused: their names sort after its own, so pruning
// would delete the new run's, and a later --resume would continue the other run.
void check_checkpoint_dir(const std::string& dir, bool resume);
// --dims NAME=SIZE,... (check, plan): sizes of symbolic dimensions by name; a usage error names the item.
std::map<std::string, int64_t> parse_dims(const Args& args);
// Every --dims name is a symbolic dimension of one of `model`'s inputs (at an axis other than the first
// where `batch_first`: plan sizes that by --batch-size); else a usage error naming it and the names there are.
void check_dims_known(const Args& args, const std::map<std::string, int64_t>& dims, const Graph& model, bool batch_first);
// The files a command reads and writes, by flag ("the model" for the positional one): an output that
// is also an input, or two outputs that are one file, is an error naming both, since writing one
// would destroy the other. `may_replace` names output flags allowed to be the model (train --save:
// the file is read before it is replaced).
struct PathUse {
  std::string flag, path;
};
void check_distinct_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs,
                          const std::vector<std::string>& may_replace = {});

// Subcommands (tools/cmd_<name>.cc). Each returns the process exit code.
int cmd_run(const std::vector<std::string>& argv);
int cmd_show(const std::vector<std::string>& argv);
int cmd_grad(const std::vector<std::string>& argv);
int cmd_train(const std::vector<std::string>& argv);
int cmd_check(const std::vector<std::string>& argv);
int cmd_plan(const std::vector<std::string>& argv);

}  // namespace graphrun::cli
