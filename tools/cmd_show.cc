// graphrun show (placeholder until implemented).
#include <iostream>

#include "tools/cli.h"

namespace graphrun::cli {

int cmd_show(const std::vector<std::string>& argv) {
  throw Error("'graphrun show' is not implemented yet");
}

}  // namespace graphrun::cli
