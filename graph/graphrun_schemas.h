// ONNX op schemas for graphrun's own ops (domain ai.graphrun, docs/ops.md), from the op table's specs,
// so that onnx::checker and onnx::shape_inference in C++ accept and type graphs that use them.
#pragma once

namespace graphrun {

// Registers the ai.graphrun domain (version 1) and its schemas with ONNX's registry. Idempotent and
// thread-safe; the ONNX reader, writer and shape inference call it before they check or infer.
void register_graphrun_schemas();

}  // namespace graphrun
