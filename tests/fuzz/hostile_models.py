# Hostile ONNX models for graphrun's fuzz tests: one-op models with mutated attributes, ranks and
# constant inputs, structured edits of real models, and the named cases of the reliability table.
import random

import numpy as np
import onnx
from onnx import TensorProto, defs, helper, numpy_helper

# The ONNX ops graphrun's CPU kernels implement, plus the pooling op that shares Conv's inference.
OPS = """Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization BitShift
Cast CastLike Ceil Celu Clip Compress Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum
DepthToSpace Div Dropout Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gemm
GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual HardSigmoid HardSwish Identity IsInf IsNaN LeakyRelu
Less LessOrEqual Log LogSoftmax MatMul Max MaxPool Mean Min Mod Mul Neg NegativeLogLikelihoodLoss NonZero
Not OneHot Or PRelu Pad Pow Range Reciprocal ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin
ReduceProd ReduceSum ReduceSumSquare Relu Reshape ReverseSequence Round Scatter ScatterElements ScatterND
Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax SoftmaxCrossEntropyLoss Softplus Softsign
SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Trilu Unsqueeze Where
Xor LpPool""".split()

OPSETS = [7, 9, 10, 11, 12, 13, 14, 15, 16, 17]
EVIL_INTS = [-7, -2, -1, 0, 0, 1, 1, 1, 2, 2, 3, 4, 5, 99, 2**31, 2**40, 2**62, -(2**62)]
TYPE_OF = {"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE,
           "tensor(int64)": TensorProto.INT64, "tensor(int32)": TensorProto.INT32,
           "tensor(bool)": TensorProto.BOOL, "tensor(uint8)": TensorProto.UINT8,
           "tensor(int8)": TensorProto.INT8, "tensor(float16)": TensorProto.FLOAT16}
NP_OF = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.INT64: np.int64,
         TensorProto.INT32: np.int32, TensorProto.BOOL: np.bool_, TensorProto.UINT8: np.uint8,
         TensorProto.INT8: np.int8, TensorProto.FLOAT16: np.float16}


def model_of(nodes, inputs, outputs, inits=(), opset=17, name="hostile"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="hostile")
    m.ir_version = 8 if opset >= 15 else 7
    return m


def evil_int(rng):
    return rng.choice(EVIL_INTS)


def evil_ints(rng, typical):
    """A list near the typical length, sometimes with evil values."""
    n = max(0, typical + rng.choice([0, 0, 0, 0, -1, 1, -typical, 2]))
    if rng.random() < 0.5:
        return [rng.choice([1, 1, 2, 3]) for _ in range(n)]
    return [evil_int(rng) for _ in range(n)]


def random_dims(rng, rank):
    return [rng.choice([1, 2, 3, 4, 5, "N", 0, None, 2**40]) if rng.random() < 0.15 else rng.choice([1, 2, 3, 4, 5])
            for _ in range(rank)]


def random_type(rng, allowed):
    choices = [TYPE_OF[t] for t in allowed if t in TYPE_OF]
    if not choices or rng.random() < 0.05:
        return rng.choice(list(NP_OF))
    if TensorProto.FLOAT in choices and rng.random() < 0.7:
        return TensorProto.FLOAT
    return rng.choice(choices)


def constant_of(rng, name, dtype, rank_hint):
    """A small constant tensor (an initializer) for inputs such as shapes, pads, axes and indices."""
    n = max(0, rank_hint + rng.choice([0, 0, 0, -1, 1, rank_hint]))
    if dtype in (TensorProto.INT64, TensorProto.INT32):
        vals = [rng.choice([0, 1, 1, 2, 3, -1]) if rng.random() < 0.7 else evil_int(rng) for _ in range(n)]
        arr = np.array(vals, dtype=np.int64)
        if dtype == TensorProto.INT32:
            arr = arr.astype(np.int32)
    else:
        arr = np.array([rng.choice([0.0, 1.0, -1.0, 2.5]) for _ in range(n)], dtype=NP_OF.get(dtype, np.float32))
    if rng.random() < 0.2:
        arr = arr[:1].reshape(()) if arr.size else np.array(0, dtype=arr.dtype)
    return numpy_helper.from_array(arr, name)


def random_op_model(rng, op=None, opset=None):
    """A model of one node of `op` with random (often invalid) attributes, ranks and constants."""
    op = op or rng.choice(OPS)
    opset = opset or rng.choice(OPSETS)
    try:
        schema = defs.get_schema(op, opset)
    except Exception:
        schema = defs.get_schema(op)
        opset = max(opset, schema.since_version)
    constraints = {t.type_param_str: t.allowed_type_strs for t in schema.type_constraints}
    x_rank = rng.choice([0, 1, 2, 3, 4, 4, 4, 5])
    n_in = rng.randint(schema.min_input, min(schema.max_input, schema.min_input + 3))
    inputs, inits, names = [], [], []
    bound = {}
    for i in range(n_in):
        formal = schema.inputs[min(i, len(schema.inputs) - 1)]
        name = "in%d" % i
        names.append(name)
        allowed = constraints.get(formal.typeStr, [formal.typeStr])
        if formal.typeStr in bound and rng.random() < 0.9:
            dtype = bound[formal.typeStr]
        else:
            dtype = random_type(rng, allowed)
            bound.setdefault(formal.typeStr, dtype)
        if i > 0 and rng.random() < 0.5:
            inits.append(constant_of(rng, name, dtype, x_rank))
        else:
            rank = x_rank if i == 0 or rng.random() < 0.6 else rng.choice([0, 1, 2, 4])
            inputs.append(helper.make_tensor_value_info(name, dtype, random_dims(rng, rank)))
    if rng.random() < 0.1 and n_in > 1:
        names[rng.randrange(1, n_in)] = ""
    attrs = {}
    for a in schema.attributes.values():
        if not a.required and rng.random() < 0.4:
            continue
        t = a.type
        A = defs.OpSchema.AttrType
        if t == A.INTS:
            attrs[a.name] = evil_ints(rng, max(1, x_rank - 2) * (2 if a.name == "pads" else 1))
        elif t == A.INT:
            attrs[a.name] = evil_int(rng) if rng.random() < 0.6 else rng.choice([0, 1, 2])
        elif t == A.FLOAT:
            attrs[a.name] = rng.choice([0.0, 1.0, -1.0, 1e30, float("nan")])
        elif t == A.FLOATS:
            attrs[a.name] = [rng.choice([0.0, 1.0, 2.0]) for _ in range(rng.randint(0, 4))]
        elif t == A.STRING:
            attrs[a.name] = rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "constant", "reflect",
                                        "edge", "bogus", ""])
        elif t == A.TENSOR:
            attrs[a.name] = constant_of(rng, "value", random_type(rng, ["tensor(float)", "tensor(int64)"]), 1)
        if a.name in attrs and rng.random() < 0.05 and t == A.INTS:
            attrs[a.name] = [float(v) for v in attrs[a.name]] or [1.5]  # a list of the wrong kind
    if op == "Constant":
        attrs = {"value": constant_of(rng, "value", TensorProto.FLOAT, 2)}
    n_out = max(1, min(schema.max_output, rng.choice([1, 1, 1, 2])))
    outs = ["out%d" % i for i in range(n_out)]
    node = helper.make_node(op, names, outs, name="node0", **attrs)
    # The checker wants a type and a rank for every graph output; the rank may well be wrong.
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [None] * rng.choice([x_rank, x_rank, 0, 1]))
               for o in outs]
    m = model_of([node], inputs, outputs, inits, opset=opset)
    return m


# ---- structured edits of a real model ----

def _ints_attr(node, name):
    for a in node.attribute:
        if a.name == name:
            return a
    return None


def structured_edit(model, rng):
    """One structured edit of a copy of `model`: an attribute, a shape, an initializer, a type, a name."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    kind = rng.choice(["attr", "attr", "attr", "input_shape", "initializer", "reshape_const", "op_type",
                       "output_is_input", "duplicate", "opset", "optional_type", "drop_attr", "attr_kind"])
    node = rng.choice(list(g.node)) if g.node else None
    if kind == "attr" and node is not None and node.attribute:
        a = rng.choice(list(node.attribute))
        if a.type == onnx.AttributeProto.INTS:
            vals = list(a.ints)
            if vals and rng.random() < 0.6:
                vals[rng.randrange(len(vals))] = evil_int(rng)
            else:
                vals = evil_ints(rng, len(vals))
            del a.ints[:]
            a.ints.extend(vals)
        elif a.type == onnx.AttributeProto.INT:
            a.i = evil_int(rng)
        elif a.type == onnx.AttributeProto.FLOAT:
            a.f = rng.choice([0.0, -1.0, 1e38, float("nan"), float("inf")])
        elif a.type == onnx.AttributeProto.STRING:
            a.s = rng.choice([b"", b"bogus", b"SAME_UPPER", b"VALID"])
    elif kind == "attr_kind" and node is not None and node.attribute:
        a = rng.choice(list(node.attribute))
        if a.type == onnx.AttributeProto.INTS:
            vals = list(a.ints)
            a.ClearField("ints")
            a.type = onnx.AttributeProto.FLOATS
            a.floats.extend(float(v) + 0.5 for v in vals)
        elif a.type == onnx.AttributeProto.INT:
            v = a.i
            a.ClearField("i")
            a.type = onnx.AttributeProto.FLOAT
            a.f = v + 0.5
    elif kind == "drop_attr" and node is not None and node.attribute:
        del node.attribute[rng.randrange(len(node.attribute))]
    elif kind == "input_shape" and g.input:
        v = rng.choice(list(g.input))
        rank = rng.choice([0, 1, 2, 3, 5, 6])
        dims = random_dims(rng, rank)
        v.type.tensor_type.ClearField("shape")
        shape = v.type.tensor_type.shape
        for d in dims:
            dim = shape.dim.add()
            if isinstance(d, str):
                dim.dim_param = d
            elif d is not None:
                dim.dim_value = d if rng.random() < 0.9 else -7
    elif kind == "initializer" and g.initializer:
        t = rng.choice(list(g.initializer))
        what = rng.choice(["scalar", "dims", "dtype", "truncate", "huge"])
        if what == "scalar":
            arr = numpy_helper.to_array(t).reshape(-1)[:1].reshape(())
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
        elif what == "dims" and t.dims:
            t.dims[rng.randrange(len(t.dims))] = evil_int(rng)
        elif what == "dtype":
            t.data_type = rng.choice([TensorProto.INT64, TensorProto.DOUBLE, TensorProto.STRING, TensorProto.BOOL, 99])
        elif what == "truncate" and t.raw_data:
            t.raw_data = t.raw_data[: len(t.raw_data) // 2]
        else:
            t.dims.append(2**33)
    elif kind == "reshape_const":
        reshapes = [n for n in g.node if n.op_type == "Reshape"]
        if reshapes:
            n = rng.choice(reshapes)
            for t in g.initializer:
                if t.name == n.input[1]:
                    vals = numpy_helper.to_array(t).copy().reshape(-1)
                    if vals.size:
                        vals[rng.randrange(vals.size)] = rng.choice([0, -7, -1, 2**40, 2**62, 10**18])
                    t.CopyFrom(numpy_helper.from_array(vals.astype(np.int64), t.name))
    elif kind == "op_type" and node is not None:
        node.op_type = rng.choice(["Conv", "MaxPool", "AveragePool", "Gemm", "MatMul", "Flatten", "Softmax",
                                   "Reshape", "Pad", "Transpose", "BatchNormalization", "Relu", "Concat"])
    elif kind == "output_is_input" and g.input and g.output:
        g.output[rng.randrange(len(g.output))].CopyFrom(rng.choice(list(g.input)))
    elif kind == "duplicate":
        if g.node and rng.random() < 0.5:
            n2 = g.node.add()
            n2.CopyFrom(rng.choice(list(g.node)[:-1] or list(g.node)))
        elif g.initializer:
            t2 = g.initializer.add()
            t2.CopyFrom(g.initializer[0])
    elif kind == "opset":
        m.opset_import[0].version = rng.choice([1, 6, 7, 9, 11, 13, 17, 18, 99])
    elif kind == "optional_type" and g.input:
        v = rng.choice(list(g.input))
        inner = onnx.TypeProto()
        inner.CopyFrom(v.type)
        v.type.Clear()
        if rng.random() < 0.5:
            v.type.optional_type.elem_type.CopyFrom(inner)
        else:
            v.type.sequence_type.elem_type.CopyFrom(inner)
    return m


def byte_edit(data, rng):
    """Random byte flips, insertions, deletions and truncations."""
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        if not b:
            break
        what = rng.random()
        i = rng.randrange(len(b))
        if what < 0.6:
            b[i] = rng.randrange(256)
        elif what < 0.75:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif what < 0.9:
            del b[i:i + rng.randint(1, 16)]
        else:
            del b[i:]
    return bytes(b)
