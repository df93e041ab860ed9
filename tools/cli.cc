// Option parsing and help text for the graphrun subcommands.
#include "tools/cli.h"

#include <cstdlib>
#include <sstream>

namespace graphrun::cli {

std::string Command::help() const {
  std::ostringstream os;
  os << "usage: " << usage << "\n\n" << summary << "\n";
  if (!options.empty()) {
    os << "\noptions:\n";
    for (const auto& o : options) {
      std::string left = "  --" + o.name + (o.value.empty() ? "" : " " + o.value);
      if (left.size() < 28) left += std::string(28 - left.size(), ' '); else left += "\n" + std::string(28, ' ');
      os << left << o.help << "\n";
    }
    os << "  --help                    show this help\n";
  }
  if (!details.empty()) os << "\n" << details << "\n";
  return os.str();
}

Args::Args(const Command& cmd, const std::vector<std::string>& argv) : cmd_(cmd) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--help" || a == "-h") { help_ = true; continue; }
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string name = a.substr(2), val;
      bool inline_val = false;
      auto eq = name.find('=');
      if (eq != std::string::npos) { val = name.substr(eq + 1); name = name.substr(0, eq); inline_val = true; }
      const Option* opt = nullptr;
      for (const auto& o : cmd_.options)
        if (o.name == name) opt = &o;
      if (!opt) throw Error(usage_error("unknown option --" + name));
      if (opt->value.empty()) {
        if (inline_val) throw Error(usage_error("--" + name + " takes no value"));
        val = "1";
      } else if (!inline_val) {
        if (i + 1 >= argv.size()) throw Error(usage_error("--" + name + " needs a value (" + opt->value + ")"));
        val = argv[++i];
      }
      if (values_.count(name) && !opt->repeatable) throw Error(usage_error("--" + name + " given twice"));
      values_[name].push_back(val);
    } else if (a == "-o") {
      // -o is the short form of --output where a command has it.
      bool has_output = false;
      for (const auto& o : cmd_.options) has_output |= o.name == "output";
      if (!has_output || i + 1 >= argv.size()) throw Error(usage_error("-o needs a file name"));
      if (values_.count("output")) throw Error(usage_error("--output given twice"));
      values_["output"].push_back(argv[++i]);
    } else if (a.size() > 1 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
      throw Error(usage_error("unknown option " + a));
    } else {
      positional_.push_back(a);
    }
  }
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

int64_t Args::get_int(const std::string& name, int64_t def) const {
  if (!has(name)) return def;
  std::string v = get(name);
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) throw Error(usage_error("--" + name + " must be an integer, got '" + v + "'"));
  return x;
}

double Args::get_double(const std::string& name, double def) const {
  if (!has(name)) return def;
  std::string v = get(name);
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) throw Error(usage_error("--" + name + " must be a number, got '" + v + "'"));
  return x;
}

std::string Args::usage_error(const std::string& msg) const {
  return "graphrun " + cmd_.name + ": " + msg + " (see graphrun " + cmd_.name + " --help)";
}

}  // namespace graphrun::cli
