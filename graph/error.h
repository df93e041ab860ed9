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

// Memory ran out (a device's, the host's, or a run's memory limit): the same one line, and a type a
// caller that can try a smaller batch catches (the evaluation).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

}  // namespace graphrun

// GR_FAIL("node '" << name << "': bad axis " << axis);  streams a message into a graphrun::Error
// (GR_FAIL_OUT_OF_MEMORY: into a graphrun::OutOfMemory).
#define GR_FAIL_AS(type, msg)             \
  do {                                    \
    std::ostringstream gr_fail_os_;       \
    gr_fail_os_ << msg;                   \
    throw type(gr_fail_os_.str());        \
  } while (0)
#define GR_FAIL(msg) GR_FAIL_AS(::graphrun::Error, msg)
#define GR_FAIL_OUT_OF_MEMORY(msg) GR_FAIL_AS(::graphrun::OutOfMemory, msg)
#define GR_CHECK(cond, msg) \
  do {                      \
    if (!(cond)) GR_FAIL(msg); \
  } while (0)
