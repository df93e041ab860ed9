// graphrun grad (placeholder until implemented).
#include <iostream>

#include "tools/cli.h"

namespace graphrun::cli {

int cmd_grad(const std::vector<std::string>& argv) {
  throw Error("'graphrun grad' is not implemented yet");
}

}  // namespace graphrun::cli
