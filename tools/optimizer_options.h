// The optimizer flags of `graphrun grad --devices` and `show --devices` (which optimizer nodes the
// data-parallel graph gets): --optimizer, --momentum, --nesterov, --weight-decay, --beta1/2, --eps.
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
// --clip-grad-norm MAX: 0 when not given; a usage error unless MAX is a positive number.
float parse_clip_grad_norm(const Args& args);

}  // namespace graphrun::cli
