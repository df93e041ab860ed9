// A float64 copy of a model: what `graphrun check` differentiates and `graphrun train --float64` trains.
#pragma once
#include "graph/ir.h"

namespace graphrun {

// The model in float64: f32 initializers, value types (inputs and outputs too), Cast targets, constants,
// the random ops' dtype and LayerNormalization's statistics become f64. With fixed_random (graphrun check's
// numeric gradient), Dropout and the random ops get a fixed seed, so that every run draws the same mask and
// noise; training (--float64) keeps them drawing afresh at each step. Everything else (integer inputs,
// shapes) is unchanged.
Graph float64_copy(const Graph& g, bool fixed_random = false);

}  // namespace graphrun
