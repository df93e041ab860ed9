// Option parsing and help text for the graphrun subcommands, on CLI11: a Command's table becomes a
// CLI::App, which splits the command line and lays out the help; Args checks what was given.
#include "tools/cli.h"

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "runtime/checkpoint.h"

namespace graphrun::cli {

namespace {

constexpr size_t kHelpColumn = 28;  // where an option's description starts in --help

// graphrun's help layout: usage, summary, the options (name and metavariable, then the description,
// whose continuation lines CLI11 indents to the same column), then the details.
class HelpFormatter final : public CLI::Formatter {
 public:
  explicit HelpFormatter(const Command& cmd) : cmd_(cmd) { column_width(kHelpColumn); }

  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::ostringstream os;
    os << "usage: " << cmd_.usage << "\n\n" << cmd_.summary << "\n";
    if (!cmd_.options.empty()) {
      os << "\noptions:\n";
      for (const CLI::Option* o : app->get_options([](const CLI::Option* o) { return o->nonpositional(); }))
        os << make_option(o, false);
    }
    if (!cmd_.details.empty()) os << "\n" << cmd_.details << "\n";
    return os.str();
  }
  // "--output FILE", not "-o,--output FILE": the description mentions the short form.
  std::string make_option_name(const CLI::Option* o, bool) const override { return "--" + o->get_lnames().at(0); }
  std::string make_option_opts(const CLI::Option* o) const override {
    return o->get_type_name().empty() ? "" : " " + o->get_type_name();
  }

 private:
  const Command& cmd_;
};

// Tables written before the help went through CLI11 indent continuation lines by hand; CLI11 indents
// them itself, so that indentation (up to the help column) is dropped.
std::string unindent(const std::string& help) {
  std::string r;
  for (size_t i = 0; i < help.size(); ++i) {
    r += help[i];
    if (help[i] != '\n') continue;
    size_t k = 0;
    while (k < kHelpColumn && i + 1 < help.size() && help[i + 1] == ' ') ++i, ++k;
  }
  return r;
}

// A Command as a CLI::App. Every option takes at most one value per occurrence (a switch none) and
// may occur any number of times: what CLI11 collects is checked by Args, which words the errors. A
// value option given no value (last on the line, or followed by another option) collects "".
struct App {
  std::unique_ptr<CLI::App> app = std::make_unique<CLI::App>();
  std::vector<CLI::Option*> options;  // of the Command's options, in its order
  CLI::Option* positional = nullptr;
  CLI::Option* help = nullptr;

  explicit App(const Command& cmd) {
    app->name("graphrun " + cmd.name);
    app->set_help_flag();  // CLI11's own help flag would be listed first and exit by exception
    app->allow_extras();   // unknown options are left for Args to name
    app->formatter(std::make_shared<HelpFormatter>(cmd));
    positional = app->add_option("positional")->expected(0, -1)->allow_extra_args()->group("");
    for (const Option& o : cmd.options) {
      CLI::Option* opt = app->add_option(o.name == "output" ? "-o,--output" : "--" + o.name);
      opt->description(unindent(o.help))->type_name(o.value)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
      if (o.value.empty()) opt->expected(0, 0);
      else opt->expected(0, 1);
      options.push_back(opt);
    }
    help = app->add_option("-h,--help")->description("show this help")->expected(0, 0);
    help->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
};

}  // namespace

std::string Command::help() const { return App(*this).app->help(); }

Args::Args(const Command& cmd, const std::vector<std::string>& argv) : cmd_(cmd) {
  // What follows "--" is positional. CLI11 knows "--" too, but after an option's value it takes it
  // for the end of that option's list and goes on parsing options, so it never sees it.
  const auto mark = std::find(argv.begin(), argv.end(), "--");
  // A switch given "=" and nothing ("--eval-only="): CLI11 reads it as the switch alone.
  for (auto it = argv.begin(); it != mark; ++it)
    if (it->size() > 3 && it->rfind("--", 0) == 0 && it->back() == '=')
      for (const Option& o : cmd_.options)
        if (o.value.empty() && *it == "--" + o.name + "=") throw Error(usage_error("--" + o.name + " takes no value"));
  App a(cmd_);
  try {
    a.app->parse(std::vector<std::string>(std::make_reverse_iterator(mark), argv.rend()));  // last first
  } catch (const CLI::Error& e) {
    throw Error(usage_error(e.what()));
  }
  help_ = a.help->count() > 0;
  if (help_) return;  // asked for help: the rest of the line does not matter
  for (const std::string& arg : a.app->remaining())
    throw Error(usage_error("unknown option " + arg.substr(0, arg.find('='))));
  for (size_t i = 0; i < cmd_.options.size(); ++i) {
    const Option& o = cmd_.options[i];
    const std::vector<std::string>& given = a.options[i]->results();
    if (given.empty()) continue;
    for (const std::string& v : given) {
      if (o.value.empty() && !v.empty()) throw Error(usage_error("--" + o.name + " takes no value"));
      if (!o.value.empty() && v.empty()) throw Error(usage_error("--" + o.name + " needs a value (" + o.value + ")"));
    }
    if (given.size() > 1 && !o.repeatable) throw Error(usage_error("--" + o.name + " given twice"));
    values_[o.name] = o.value.empty() ? std::vector<std::string>(given.size(), "1") : given;
  }
  positional_ = a.positional->results();
  if (mark != argv.end()) positional_.insert(positional_.end(), mark + 1, argv.end());
}

std::string Args::get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  std::vector<std::string> r;
  auto it = values_.find(name);
  if (it == values_.end()) return r;
  for (const auto& v : it->second) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) r.push_back(item);
  }
  return r;
}

std::vector<std::string> Args::given(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t def) const {
  if (!has(name)) return def;
  const std::string v = get(name);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) throw Error(usage_error("--" + name + " must be an integer, got '" + v + "'"));
  if (errno == ERANGE) throw Error(usage_error("--" + name + " is out of range, got '" + v + "'"));
  return x;
}

double Args::get_double(const std::string& name, double def) const {
  if (!has(name)) return def;
  const std::string v = get(name);
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) throw Error(usage_error("--" + name + " must be a number, got '" + v + "'"));
  if (errno == ERANGE && (x == HUGE_VAL || x == -HUGE_VAL))
    throw Error(usage_error("--" + name + " is out of range, got '" + v + "'"));
  return x;
}

std::string Args::usage_error(const std::string& msg) const {
  return "graphrun " + cmd_.name + ": " + msg + " (see graphrun " + cmd_.name + " --help)";
}

void check_output_path(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error(flag + " " + path + ": cannot write there: it is a directory");
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);  // an existing file: not truncated
  bool created = false;
  if (fd < 0 && errno == ENOENT) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created = fd >= 0;
  }
  if (fd < 0) {
    const int err = errno;
    const fs::path dir = fs::path(path).parent_path();
    std::string why = std::strerror(err);
    if (err == ENOENT && !dir.empty() && !fs::is_directory(dir, ec)) why += " (no directory '" + dir.string() + "')";
    throw Error(flag + " " + path + ": cannot write there: " + why);
  }
  ::close(fd);
  if (created) ::unlink(path.c_str());
}

std::map<std::string, int64_t> parse_dims(const Args& args) {
  std::map<std::string, int64_t> dims;
  if (!args.has("dims")) return dims;
  std::stringstream list(args.get("dims"));
  for (std::string item; std::getline(list, item, ',');) {
    const size_t eq = item.find('=');
    int64_t size = 0;
    const std::string name = eq == std::string::npos ? "" : item.substr(0, eq);
    const std::string num = eq == std::string::npos ? "" : item.substr(eq + 1);
    const bool ok = !name.empty() && !num.empty() && num.size() <= 6 &&
                    num.find_first_not_of("0123456789") == std::string::npos && (size = std::stoll(num)) >= 1;
    if (!ok) throw Error(args.usage_error("--dims: '" + item + "' is not NAME=SIZE with a SIZE of 1 to 999999"));
    dims[name] = size;
  }
  return dims;
}

void check_dims_known(const Args& args, const std::map<std::string, int64_t>& dims, const Graph& model, bool batch_first) {
  std::set<std::string> named, batch;
  for (const auto& in : model.inputs) {
    if (model.is_initializer(in)) continue;
    const ValueInfo* vi = model.info(in);
    if (!vi || !vi->has_shape) continue;
    for (size_t i = 0; i < vi->shape.size(); ++i)
      if (!vi->shape[i].known() && !vi->shape[i].param.empty())
        (batch_first && i == 0 ? batch : named).insert(vi->shape[i].param);
  }
  for (const auto& [name, size] : dims) {
    if (named.count(name)) continue;
    if (batch.count(name))
      throw Error(args.usage_error("--dims " + name + "=" + std::to_string(size) + ": '" + name +
                                   "' is the inputs' batch dimension, which --batch-size and the replicas size"));
    std::string have;
    for (const auto& n : named) have += (have.empty() ? "" : ", ") + n;
    throw Error(args.usage_error("--dims " + name + "=" + std::to_string(size) + ": no input of the model has a dimension named '" +
                                 name + "' (" + (have.empty() ? std::string("it names none") : "it names " + have) + ")"));
  }
}

void check_checkpoint_dir(const std::string& dir, bool resume) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw Error("--checkpoint-dir " + dir + ": cannot create the folder" + (ec ? ": " + ec.message() : std::string()));
  const std::string probe = (fs::path(dir) / (".graphrun-probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("--checkpoint-dir " + dir + ": cannot write there: " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  if (resume) return;
  const std::string last = runtime::latest_checkpoint(dir);
  if (!last.empty())
    throw Error("--checkpoint-dir " + dir + " holds the checkpoints of another run (newest " +
                fs::path(last).filename().string() +
                "): continue that run with --resume, or give this one an empty folder");
}

void check_distinct_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs,
                          const std::vector<std::string>& may_replace) {
  namespace fs = std::filesystem;
  auto key = [](const std::string& p) {
    std::error_code ec;
    fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);  // symbolic links resolved where they exist
    return ec ? fs::path(p).lexically_normal().string() : c.string();
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].path.empty()) continue;
    const std::string o = key(outputs[i].path);
    const bool may_be_model =
        std::find(may_replace.begin(), may_replace.end(), outputs[i].flag) != may_replace.end();
    const bool model_kept = may_be_model && std::any_of(inputs.begin(), inputs.end(), [&](const PathUse& m) {
                              return m.flag == "the model" && !m.path.empty() && key(m.path) == o;
                            });
    std::error_code ec;
    // A file the output would replace (not a folder, nor the model it may replace).
    const bool replaces_file = !model_kept && fs::exists(outputs[i].path, ec) && !fs::is_directory(outputs[i].path, ec);
    for (const PathUse& in : inputs) {
      if (in.path.empty()) continue;
      // A folder of data (--data DIR): an output that would replace a file in it (at any depth) could
      // destroy what the command reads, the test labels of a dataset for instance.
      if (replaces_file && fs::is_directory(in.path, ec)) {
        const std::string dir = key(in.path) + "/";
        if (o.compare(0, dir.size(), dir) == 0)
          throw Error(outputs[i].flag + " " + outputs[i].path + " is a file in " + in.flag + "'s folder " + in.path +
                      ", which this command reads: writing it could destroy the data; give a path outside it");
      }
      if (key(in.path) != o) continue;
      if (in.flag == "the model" && may_be_model) continue;
      throw Error(outputs[i].flag + " " + outputs[i].path + " is " +
                  (in.flag == "the model" ? std::string("the model") : in.flag + "'s file") +
                  " this command reads: writing it would destroy it; give another file");
    }
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && key(outputs[j].path) == o)
        throw Error(outputs[i].flag + " and " + outputs[j].flag + " name the same file, " + outputs[i].path +
                    ": give each its own");
  }
}

}  // namespace graphrun::cli
