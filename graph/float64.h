// A float64 copy of a model: what `graphrun check` differentiates and `graphrun train --float64` trains.
#pragma once
#include "graph/ir.h"

namespace graphrun {

// The model in float64: f32 initializers, value types (inputs and outputs too), Cast targets, constants
// and LayerNormalization's statistics become f64; Dropout gets a fixed seed so that every run draws
// the same mask. Everything else (integer inputs, shapes) is unchanged.
Graph float64_copy(const Graph& g);

}  // namespace graphrun
