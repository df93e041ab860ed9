// The optimizer flags (which optimizer nodes the data-parallel graph gets): --optimizer, --momentum,
// --nesterov, --weight-decay, --beta1/2, --eps, --clip-grad-norm. One parser for train, and for grad,
// show and plan with --devices, so that every command reads and refuses them alike.
#pragma once
#include <string>
#include <vector>

#include "runtime/replicate.h"
#include "tools/cli.h"

namespace graphrun::cli {

std::vector<Option> optimizer_options();
// Reads the flags above (usage errors for bad values, and for any of them when the pipeline has no
// optimizer, !data_parallel: "needs --devices"); torch's defaults where not given.
runtime::OptimizerOptions parse_optimizer_options(const Args& args, bool data_parallel);
// --weight-decay's default for --optimizer KIND: torch.optim's, 0.01 for adamw (AdamW's), else 0.
double default_weight_decay(const std::string& kind);

}  // namespace graphrun::cli
