// graphrun train (placeholder until implemented).
#include <iostream>

#include "tools/cli.h"

namespace graphrun::cli {

int cmd_train(const std::vector<std::string>& argv) {
  throw Error("'graphrun train' is not implemented yet");
}

}  // namespace graphrun::cli
