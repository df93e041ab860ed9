// graphrun's one error type: a message a user can read. Input/usage errors exit with code 2.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace graphrun {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace graphrun

// GR_FAIL("node '" << name << "': bad axis " << axis);  streams a message into a graphrun::Error.
#define GR_FAIL(msg)                          \
  do {                                        \
    std::ostringstream gr_fail_os_;           \
    gr_fail_os_ << msg;                       \
    throw ::graphrun::Error(gr_fail_os_.str()); \
  } while (0)
#define GR_CHECK(cond, msg) \
  do {                      \
    if (!(cond)) GR_FAIL(msg); \
  } while (0)
