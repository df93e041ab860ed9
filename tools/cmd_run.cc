// graphrun run (placeholder until implemented).
#include <iostream>

#include "tools/cli.h"

namespace graphrun::cli {

int cmd_run(const std::vector<std::string>& argv) {
  throw Error("'graphrun run' is not implemented yet");
}

}  // namespace graphrun::cli
