// The attributes of LSTM, GRU and RNN nodes (rnn_attrs.h).
#include "graph/rnn_attrs.h"

#include <cctype>

#include "graph/error.h"

namespace graphrun {
namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string list;
  for (const auto& s : v) list += (list.empty() ? "" : ",") + s;
  return list;
}

}  // namespace

RnnAttrs rnn_attrs(const Node& node, const std::string& what) {
  RnnAttrs r;
  // LSTM and LSTMGrad, GRU and GRUGrad: the same attributes.
  const bool lstm = node.op_type.rfind("LSTM", 0) == 0, gru = node.op_type.rfind("GRU", 0) == 0;
  r.direction = node.attr_s("direction", "forward");
  GR_CHECK(r.direction == "forward" || r.direction == "reverse" || r.direction == "bidirectional",
           what << ": attribute 'direction' is '" << r.direction << "'; must be forward, reverse or bidirectional");
  r.D = r.direction == "bidirectional" ? 2 : 1;
  const int64_t layout = node.attr_i("layout", 0);
  GR_CHECK(layout == 0 || layout == 1, what << ": attribute 'layout' is " << layout << "; must be 0 or 1");
  r.layout1 = layout == 1;
  if (const Attribute* a = node.attr("clip")) {
    r.has_clip = true;
    r.clip = a->f;
    GR_CHECK(r.clip > 0, what << ": attribute 'clip' is " << r.clip << "; must be positive");
  }
  if (lstm)
    GR_CHECK(node.attr_i("input_forget", 0) == 0,
             what << ": attribute 'input_forget' = 1 (coupled input and forget gates) is not supported");
  if (gru) r.lbr = node.attr_i("linear_before_reset", 0) != 0;
  const Attribute* a = node.attr("activations");
  if (!lstm && !gru) {
    // RNN: one per direction (one given for both directions applies to each), Tanh by default.
    r.acts.assign(static_cast<size_t>(r.D), RnnAct::Tanh);
    if (!a) return r;
    const size_t n = a->strings.size();
    GR_CHECK(n == 1 || n == static_cast<size_t>(r.D), what << ": attribute 'activations' [" << joined(a->strings)
                                                           << "] must list one activation per direction (" << r.D
                                                           << ")");
    for (int d = 0; d < r.D; ++d) {
      const std::string f = lower(a->strings[n == 1 ? 0 : static_cast<size_t>(d)]);
      GR_CHECK(f == "tanh" || f == "relu" || f == "sigmoid",
               what << ": attribute 'activations' [" << joined(a->strings)
                    << "] is not supported; only Tanh, Relu and Sigmoid are");
      r.acts[static_cast<size_t>(d)] = f == "tanh" ? RnnAct::Tanh : f == "relu" ? RnnAct::Relu : RnnAct::Sigmoid;
    }
  } else if (a) {
    const std::vector<std::string> defaults =
        lstm ? std::vector<std::string>{"sigmoid", "tanh", "tanh"} : std::vector<std::string>{"sigmoid", "tanh"};
    bool ok = a->strings.size() == defaults.size() * static_cast<size_t>(r.D);
    for (size_t i = 0; ok && i < a->strings.size(); ++i) ok = lower(a->strings[i]) == defaults[i % defaults.size()];
    GR_CHECK(ok, what << ": attribute 'activations' [" << joined(a->strings)
                      << "] is not supported; only the defaults (" << (lstm ? "Sigmoid, Tanh, Tanh" : "Sigmoid, Tanh")
                      << " per direction) are");
  }
  return r;
}

}  // namespace graphrun
