// The options that shape the pipeline of `grad` and `show` (--loss, --freeze, --loss-output,
// --label-smoothing, --devices, the optimizer flags, --dump-after) and their reading into
// runtime::PipelineOptions.
#pragma once
#include <vector>

#include "runtime/pipeline.h"
#include "tools/cli.h"

namespace graphrun::cli {

// --loss, --freeze, --loss-output, --label-smoothing.
std::vector<Option> backward_options();
// --label-smoothing EPS (train, grad, show, plan, check).
Option label_smoothing_option();
// --label-smoothing's EPS (0 when not given): a usage error (exit 2) unless a number with 0 <= EPS < 1,
// and with a `loss` other than cross-entropy.
// --loss's kind (default cross-entropy); a usage error for another word.
autodiff::LossKind parse_loss(const Args& args);
double parse_label_smoothing(const Args& args, autodiff::LossKind loss);
// --dump-after PASS (show, grad and train).
Option dump_after_option();
// --sync-bn (show, grad and train with replicas).
Option sync_bn_option();

// Reads the options above, --devices and the optimizer flags (before any file is loaded; bad values
// are usage errors, exit 2). `data_parallel`: the data-parallel pipeline (grad/show --devices N);
// its devices are --devices' (one CPU replica when not given). Otherwise the pipeline stops after
// the backward pass and the optimizer flags are errors.
runtime::PipelineOptions parse_pipeline_options(const Args& args, bool data_parallel);

// --dump-after: a usage error unless it names a registered pass (exit 2 before any work).
void check_dump_after_option(const Args& args);

}  // namespace graphrun::cli
