#!/usr/bin/python3
# Writes the fuzz seed corpus (tests/fuzz/corpus/<reader>/): small valid files ("good_*") and one file
# per class of hostile input that crashed or fooled a reader ("bad_*"; the reliability table of issue
# 11 plus what the fuzzers found). tests/hostile_input_test.cc runs every file through the CLI.
# Deterministic: rerunning it rewrites the same bytes.
import gzip
import os
import struct
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_models import model_of  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
F32 = TensorProto.FLOAT


def write(reader, name, data):
    os.makedirs(os.path.join(OUT, reader), exist_ok=True)
    if isinstance(data, onnx.ModelProto):
        data = data.SerializeToString()
    with open(os.path.join(OUT, reader, name), "wb") as f:
        f.write(data)


def vi(name, shape, dtype=F32):
    return helper.make_tensor_value_info(name, dtype, shape)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def weights(shape, seed=0):
    return (np.random.RandomState(seed).randn(*shape) * 0.1).astype(np.float32)


# ---- ONNX models ----

def lenet_like(conv_attrs=None, x_shape=("N", 1, 8, 8), w_shape=(2, 1, 3, 3), pool_attrs=None, extra=None):
    """A tiny LeNet: Conv, Relu, MaxPool, Flatten, Gemm (8x8 input, 2 channels, 3 classes)."""
    ca = {"kernel_shape": [3, 3], "pads": [0, 0, 0, 0], "strides": [1, 1]}
    ca.update(conv_attrs or {})
    ca = {k: v for k, v in ca.items() if v is not None}
    pa = {"kernel_shape": [2, 2], "strides": [2, 2]}
    pa.update(pool_attrs or {})
    nodes = [helper.make_node("Conv", ["image", "conv.w", "conv.b"], ["c"], name="conv", **ca),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", **pa),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], name="fc", transB=1)]
    inits = [init("conv.w", weights(w_shape)), init("conv.b", np.zeros(w_shape[0], np.float32)),
             init("fc.w", weights((3, 18), 1)), init("fc.b", np.zeros(3, np.float32))]
    m = model_of(nodes, [vi("image", list(x_shape))], [vi("logits", ["N", 3])], inits, opset=13, name="tiny_lenet")
    if extra:
        extra(m)
    return m


def mlp_reshape(shape_const):
    """Reshape(x[N,2,3], const) -> MatMul -> output: the Reshape constant is the hostile part."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"], name="reshape"),
             helper.make_node("MatMul", ["flat", "w"], ["y"], name="matmul")]
    inits = [init("shape", np.array(shape_const, dtype=np.int64)), init("w", weights((6, 2)))]
    return model_of(nodes, [vi("x", ["N", 2, 3])], [vi("y", ["N", 2])], inits, opset=13, name="mlp")


def node_attr(m, node_name, attr, value):
    for n in m.graph.node:
        if n.name == node_name:
            for a in list(n.attribute):
                if a.name == attr:
                    n.attribute.remove(a)
            if value is not None:
                n.attribute.append(helper.make_attribute(attr, value))


def set_input_shape(m, shape):
    t = m.graph.input[0].type.tensor_type
    t.ClearField("shape")
    for d in shape:
        dim = t.shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        else:
            dim.dim_value = d


def replace_init(m, name, arr):
    for i, t in enumerate(m.graph.initializer):
        if t.name == name:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.asarray(arr), name))


def single(op, inputs, attrs=None, inits=(), opset=13, out_rank=4):
    """One node of `op` over typed inputs [(name, shape, dtype)] and initializers."""
    ins = [vi(n, s, d) for n, s, d in inputs]
    names = [n for n, _, _ in inputs] + [t.name for t in inits]
    node = helper.make_node(op, names, ["y"], name=op.lower(), **(attrs or {}))
    return model_of([node], ins, [vi("y", [None] * out_rank)], list(inits), opset=opset, name=op.lower())


def onnx_cases():
    yield "good_tiny_lenet.onnx", lenet_like()
    yield "good_mlp_reshape.onnx", mlp_reshape([-1, 6])
    yield "good_pad.onnx", single("Pad", [("x", ["N", 3], F32)], inits=[init("pads", np.array([0, 1, 0, 2], np.int64))],
                                 out_rank=2)
    # The reliability table: each class once.
    yield "bad_conv_strides_0.onnx", lenet_like({"strides": [0, 1]})
    yield "bad_pool_strides_0.onnx", lenet_like(pool_attrs={"strides": [2, 0]})
    yield "bad_conv_dilations_0.onnx", lenet_like({"dilations": [1, 0]})
    yield "bad_conv_kernel_0.onnx", lenet_like({"kernel_shape": [0, 3]})
    yield "bad_conv_pads_length.onnx", lenet_like({"pads": [1, 1]})
    yield "bad_conv_pads_3_spatial.onnx", lenet_like({"pads": [0] * 6, "strides": [1, 1, 1], "kernel_shape": [3, 3, 3]})
    yield "bad_conv_negative_pads.onnx", lenet_like({"pads": [0, -2, 0, 0]})
    yield "bad_conv_float_pads.onnx", lenet_like({"pads": [0.5, 0.0, 0.0, 0.0]})
    yield "bad_conv_no_kernel_weight_rank_5.onnx", lenet_like({"kernel_shape": None, "pads": None, "strides": None},
                                                              w_shape=(2, 1, 3, 3, 3))
    yield "bad_conv_rank0_image.onnx", lenet_like(x_shape=())
    yield "bad_conv_rank2_image.onnx", lenet_like(x_shape=("N", 64))
    yield "bad_conv_scalar_weight.onnx", lenet_like(extra=lambda m: replace_init(m, "conv.w", np.float32(0.5)))
    yield "bad_conv_int64_weight.onnx", lenet_like(extra=lambda m: replace_init(m, "conv.w", np.ones((2, 1, 3, 3), np.int64)))
    yield "bad_conv_group_0.onnx", lenet_like({"group": 0})
    yield "bad_conv_auto_pad_bogus.onnx", lenet_like({"auto_pad": "BOGUS", "pads": None})
    yield "bad_flatten_axis_99.onnx", lenet_like(extra=lambda m: node_attr(m, "flatten", "axis", 99))
    yield "bad_softmax_axis_99.onnx", single("Softmax", [("x", ["N", 3], F32)], {"axis": 99}, out_rank=2)
    yield "bad_concat_axis_99.onnx", single("Concat", [("a", ["N", 3], F32), ("b", ["N", 3], F32)], {"axis": 99},
                                             out_rank=2)
    yield "bad_transpose_perm.onnx", single("Transpose", [("x", ["N", 3, 4], F32)], {"perm": [0, 0, 7]}, out_rank=3)
    yield "bad_output_is_input.onnx", lenet_like(extra=lambda m: m.graph.output[0].CopyFrom(m.graph.input[0]))
    yield "bad_output_is_initializer.onnx", lenet_like(extra=lambda m: m.graph.output.append(vi("fc.b", [3])))
    yield "bad_reshape_huge.onnx", mlp_reshape([2**40, 2**40])
    yield "bad_reshape_zero.onnx", mlp_reshape([0, 0, 0, 0])
    yield "bad_reshape_minus_7.onnx", mlp_reshape([-7, 6])
    yield "bad_reshape_two_minus_1.onnx", mlp_reshape([-1, -1])
    yield "bad_matmul_as_conv.onnx", lenet_like(extra=lambda m: setattr(m.graph.node[4], "op_type", "Conv") or
                                                m.graph.node[4].ClearField("attribute"))
    yield "bad_pad_huge.onnx", single("Pad", [("x", ["N", 3], F32)],
                                      inits=[init("pads", np.array([0, 7400000000000000000, 0, 0], np.int64))], out_rank=2)
    yield "bad_pad_length.onnx", single("Pad", [("x", ["N", 3], F32)], inits=[init("pads", np.array([1, 1], np.int64))],
                                        out_rank=2)
    yield "bad_expand_huge.onnx", single("Expand", [("x", [1, 1], F32)],
                                         inits=[init("shape", np.array([2**31, 2**31], np.int64))], out_rank=2)
    yield "bad_constant_of_shape_huge.onnx", single("ConstantOfShape", [],
                                                    inits=[init("shape", np.array([10**6, 10**6, 10], np.int64))],
                                                    out_rank=3)
    yield "bad_tile_repeats.onnx", single("Tile", [("x", ["N", 3], F32)], inits=[init("repeats", np.array([2], np.int64))],
                                          out_rank=2)
    yield "bad_unsqueeze_axis.onnx", single("Unsqueeze", [("x", ["N", 3], F32)],
                                            inits=[init("axes", np.array([9], np.int64))], out_rank=3)
    yield "bad_slice_step_0.onnx", single("Slice", [("x", ["N", 3], F32)],
                                          inits=[init("starts", np.array([0], np.int64)), init("ends", np.array([2], np.int64)),
                                                 init("axes", np.array([1], np.int64)), init("steps", np.array([0], np.int64))],
                                          out_rank=2)
    # ONNX 1.12's data propagation of a Slice of a Shape narrows the steps to 32 bits (it looped out of memory or
    # crashed at 2**31 and beyond).
    yield "bad_slice_step_huge.onnx", single("Slice", [("x", [2, 3], F32)],
                                             inits=[init("starts", np.array([0], np.int64)),
                                                    init("ends", np.array([10], np.int64)),
                                                    init("axes", np.array([0], np.int64)),
                                                    init("steps", np.array([2**31], np.int64))], out_rank=2)
    yield "bad_gemm_rank3.onnx", single("Gemm", [("a", [2, 3, 4], F32), ("b", [4, 5], F32)], out_rank=2)
    yield "bad_batchnorm_rank0.onnx", single("BatchNormalization", [("x", [], F32), ("s", [1], F32), ("b", [1], F32),
                                                                   ("m", [1], F32), ("v", [1], F32)], out_rank=0)

    def optional_input(m):
        inner = onnx.TypeProto()
        inner.CopyFrom(m.graph.input[0].type)
        m.graph.input[0].type.Clear()
        m.graph.input[0].type.optional_type.elem_type.CopyFrom(inner)

    def sequence_input(m):
        inner = onnx.TypeProto()
        inner.CopyFrom(m.graph.input[0].type)
        m.graph.input[0].type.Clear()
        m.graph.input[0].type.sequence_type.elem_type.CopyFrom(inner)

    yield "bad_optional_input.onnx", lenet_like(extra=optional_input)
    yield "bad_sequence_input.onnx", lenet_like(extra=sequence_input)
    yield "bad_input_dim_minus_7.onnx", lenet_like(x_shape=("N", 1, -7, 8))
    yield "bad_input_huge_dims.onnx", lenet_like(x_shape=("N", 1, 2**40, 2**40))
    yield "bad_duplicate_output_names.onnx", lenet_like(extra=lambda m: m.graph.output.append(m.graph.output[0]))
    yield "bad_initializer_truncated.onnx", lenet_like(
        extra=lambda m: setattr(m.graph.initializer[0], "raw_data", m.graph.initializer[0].raw_data[:7]))
    yield "bad_initializer_dims_overflow.onnx", lenet_like(
        extra=lambda m: m.graph.initializer[1].dims.extend([2**32, 2**32]))

    def typed_huge(m):  # float_data with dims promising a trillion values
        t = m.graph.initializer[1]
        t.ClearField("raw_data")
        t.ClearField("dims")
        t.dims.extend([10**6, 10**6])
        t.float_data.extend([0.0, 0.0])
    yield "bad_initializer_typed_huge.onnx", lenet_like(extra=typed_huge)
    yield "bad_weight_rank_mismatch_convtranspose.onnx", single(
        "ConvTranspose", [("x", ["N", 2, 5, 5], F32)], inits=[init("w", weights((2,)))], out_rank=4)
    # An empty int64 initializer (Reshape to a scalar): shape propagation once passed its null data pointer to
    # memcpy (UBSan, found by fuzz_onnx in CI).
    yield "good_reshape_to_scalar.onnx", single("Reshape", [("x", [1], F32)],
                                                inits=[init("shape", np.zeros((0,), np.int64))], out_rank=0)

    def short_constant(op, dtype, rest, before):  # a Constant whose raw_data is shorter than its one value
        def build(m):
            t = TensorProto(name="v", data_type=dtype, dims=[1], raw_data=b"\x01" * 3)
            m.graph.node[0].input.insert(before, "c")
            m.graph.node.insert(0, helper.make_node("Constant", [], ["c"], value=t))
        m = single(op, rest[0], inits=rest[1], out_rank=rest[2])
        build(m)
        return m
    yield "bad_slice_constant_starts_3_bytes.onnx", short_constant(
        "Slice", TensorProto.INT64, ([("x", ["N", 3], F32)], [init("ends", np.array([2], np.int64)),
                                                           init("axes", np.array([1], np.int64))], 2), 1)
    yield "bad_resize_constant_scales_3_bytes.onnx", short_constant(
        "Resize", TensorProto.FLOAT, ([("x", ["N", 3, 4, 4], F32)], [init("roi", np.zeros((0,), np.float32))], 4), 2)
    # If (passes::inline_static_ifs): on a shape, taken on load; on data, refused; a taken branch with a huge
    # constant, refused after it is inlined; a condition computed through Slice with the most negative step.
    def if_model(cond_nodes, then_nodes, then_out, extra_inits=(), y_shape=("N", 3)):
        then_g = helper.make_graph(then_nodes, "then", [], [vi(then_out, None)])
        else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["same"])], "else", [], [vi("same", None)])
        nodes = cond_nodes + [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
        return model_of(nodes, [vi("x", ["N", 1, 3])], [vi("y", list(y_shape))],
                        [init("one", np.array(1, np.int64)), init("axes", np.array([1], np.int64))] + list(extra_inits),
                        opset=13, name="if")
    on_shape = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "one"], ["d1"]),
                helper.make_node("Equal", ["d1", "one"], ["cond"])]
    squeeze = [helper.make_node("Squeeze", ["x", "axes"], ["sq"])]
    yield "good_if_on_shape.onnx", if_model(on_shape, squeeze, "sq")
    yield "bad_if_on_data.onnx", if_model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                                           helper.make_node("Cast", ["s"], ["cond"], to=TensorProto.BOOL)], squeeze, "sq")
    yield "bad_if_branch_huge.onnx", if_model(on_shape, [helper.make_node(
        "ConstantOfShape", ["big"], ["sq"])], "sq", [init("big", np.array([2**40, 2**40], np.int64))], (None, None))
    yield "bad_if_slice_min_step.onnx", if_model(
        [helper.make_node("Slice", ["vec", "s0", "s1", "s2", "s3"], ["sl"]),
         helper.make_node("Gather", ["sl", "one"], ["m"]), helper.make_node("Equal", ["m", "one"], ["cond0"]),
         helper.make_node("Identity", ["cond0"], ["cond"])], squeeze, "sq",
        [init("vec", np.array([1, 1, 1], np.int64)),
         init("s0", np.array([2**62], np.int64)), init("s1", np.array([-2**63], np.int64)),
         init("s2", np.array([0], np.int64)), init("s3", np.array([-2**63], np.int64))])
    # nn.EmbeddingBag's Loop (passes::vectorize_bag_loops rewrites it on load): the shape torch writes, and one
    # whose bounds are huge (valid: Slice clamps them; the mask must not be sized from them).
    def bag_loop(offsets_init=None):
        I64 = TensorProto.INT64
        body = helper.make_graph(
            [helper.make_node("Gather", ["bounds", "i"], ["s"], axis=0), helper.make_node("Gather", ["ends", "i"], ["e"], axis=0),
             helper.make_node("Unsqueeze", ["s", "zero1"], ["s1"]), helper.make_node("Unsqueeze", ["e", "zero1"], ["e1"]),
             helper.make_node("Slice", ["text", "s1", "e1", "zero1"], ["ids"]),
             helper.make_node("Gather", ["weight", "ids"], ["rows"], axis=0),
             helper.make_node("ReduceMean", ["rows"], ["bag"], axes=[0], keepdims=0),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])],
            "bag_body", [vi("i", [], I64), vi("cond_in", [], TensorProto.BOOL)],
            [vi("cond_out", [], TensorProto.BOOL), vi("bag", [4])])
        nodes = [helper.make_node("Shape", ["text"], ["tshape"]), helper.make_node("Gather", ["tshape", "zero"], ["t"]),
                 helper.make_node("Unsqueeze", ["t", "zero1"], ["t1"]),
                 helper.make_node("Concat", ["offsets", "t1"], ["bounds"], axis=0),
                 helper.make_node("Slice", ["bounds", "one1", "big1", "zero1"], ["ends"]),
                 helper.make_node("Shape", ["ends"], ["eshape"]), helper.make_node("Gather", ["eshape", "zero"], ["m"]),
                 helper.make_node("Loop", ["m", "true"], ["y"], name="bag_loop", body=body)]
        inputs = [vi("text", ["T"], I64)] + ([] if offsets_init is not None else [vi("offsets", ["B"], I64)])
        inits = [init("weight", weights((10, 4))), init("zero", np.array(0, np.int64)), init("zero1", np.array([0], np.int64)),
                 init("one1", np.array([1], np.int64)), init("big1", np.array([2**62], np.int64)),
                 init("true", np.array(True))]
        if offsets_init is not None:
            inits.append(init("offsets", offsets_init))
        return model_of(nodes, inputs, [vi("y", ["B", 4])], inits, opset=13, name="bag")
    yield "good_embedding_bag_loop.onnx", bag_loop()
    yield "good_embedding_bag_loop_bounds_huge.onnx", bag_loop(np.array([0, 2**62, -2**62, 7], np.int64))
    # ai.onnx.preview.training's Gradient (expanded on load by autodiff): at the values, at another value, second
    # order, and inputs that do not match xs and zs.
    def gradient_model(grads, inputs=("x", "h1")):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Tanh", ["p"], ["z"]),
                 helper.make_node("ReduceSum", ["z"], ["y"], keepdims=0)]
        outs = []
        for k, (ins, outputs, attrs) in enumerate(grads):
            nodes.append(helper.make_node("Gradient", ins, outputs, name="grad%d" % k,
                                          domain="ai.onnx.preview.training", **attrs))
            outs += [vi(o, [3, 3] if o.endswith("w") else ["N", 3]) for o in outputs if o and o[0] != "g"]
        m = model_of(nodes, [vi(i, ["N", 3]) for i in inputs], [vi("y", [])] + outs, [init("w", weights((3, 3)))],
                     opset=13, name="gradient")
        m.opset_import.append(helper.make_opsetid("ai.onnx.preview.training", 1))
        return m
    yield "good_gradient.onnx", gradient_model([(["x", "w"], ["dx", "dw"], {"xs": ["x", "w"], "y": "y"}),
                                                (["h1"], ["dz"], {"xs": ["z"], "y": "y"}),
                                                (["w", "x"], ["ddw"], {"xs": ["w"], "zs": ["x"], "y": "dw"})])
    yield "bad_gradient_inputs.onnx", gradient_model([(["x"], ["dx"], {"xs": ["x"], "zs": ["w"], "y": "y"})])
    # Each Gradient of the one before's output: nodes grow as 3^k (refused past the expansion limit).
    chain = [(["x"], ["g0"], {"xs": ["x"], "y": "y"})]
    for k in range(1, 24):
        chain.append((["x"], ["g%d" % k], {"xs": ["x"], "y": "g%d" % (k - 1)}))
    yield "bad_gradient_chain.onnx", gradient_model(chain)

    # Opset 21: the ops read through their opset-17 forms (GroupNormalization, Col2Im, AffineGrid).
    lowered = [helper.make_node("GroupNormalization", ["x", "gs", "gb"], ["n"], name="gn", num_groups=2, epsilon=1e-3),
               helper.make_node("Reshape", ["n", "cols"], ["c"], name="cols"),
               helper.make_node("Col2Im", ["c", "img", "blk"], ["f"], name="fold", strides=[2, 2], pads=[0, 1, 1, 0]),
               helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="grid", align_corners=1),
               helper.make_node("GridSample", ["f", "grid"], ["y"], name="sample", mode="linear")]
    yield "good_opset21_lowered.onnx", model_of(
        lowered, [vi("x", ["N", 4, 3, 3]), vi("theta", ["N", 2, 3])], [vi("y", ["N", 1, 5, 4])],
        [init("gs", np.ones(4, np.float32)), init("gb", np.zeros(4, np.float32)), init("cols", np.array([0, 4, 9], np.int64)),
         init("img", np.array([5, 6], np.int64)), init("blk", np.array([2, 2], np.int64)),
         init("size", np.array([2, 1, 5, 4], np.int64))], opset=21, name="lowered")

    # Opset 23: Attention (grouped heads, a past, causal, a bool mask, softcap), RotaryEmbedding, and opset 18's
    # ScatterElements max, read through their opset-17 forms.
    attention = [helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["qr"], name="rope", num_heads=4),
                 helper.make_node("Attention", ["qr", "k", "v", "mask", "pk", "pv"], ["a", "present_k"], name="sdpa",
                                  q_num_heads=4, kv_num_heads=2, is_causal=1, softcap=2.0),
                 helper.make_node("ScatterElements", ["a", "idx", "upd"], ["y"], name="smax", axis=1, reduction="max")]
    m = model_of(attention, [vi("q", ["N", 3, 8]), vi("k", ["N", 3, 4]), vi("v", ["N", 3, 4]),
                             helper.make_tensor_value_info("mask", TensorProto.BOOL, ["N", 1, 3, 4]), vi("pk", ["N", 2, 1, 2]),
                             vi("pv", ["N", 2, 1, 2])],
                 [vi("y", ["N", 3, 8]), vi("present_k", ["N", 2, 4, 2])],
                 [init("cos", np.ones((6, 1), np.float32)), init("sin", np.zeros((6, 1), np.float32)),
                  init("pos", np.array([[0, 1, 2]], np.int64)), init("idx", np.zeros((1, 3, 8), np.int64)),
                  init("upd", weights((1, 3, 8)))],
                 opset=23, name="attention")
    m.ir_version = 11
    yield "good_opset23_attention.onnx", m
    m = model_of([helper.make_node("Attention", ["q", "q", "q"], ["y"], name="sdpa3")], [vi("q", ["N", 3, 8])],
                 [vi("y", ["N", 3, 8])], opset=23, name="attention_3d_no_heads")
    m.ir_version = 11
    yield "bad_attention_3d_no_heads.onnx", m
    yield "bad_scatter_nd_max.onnx", model_of(
        [helper.make_node("ScatterND", ["x", "i", "x"], ["y"], name="nd_max", reduction="max")], [vi("x", ["N"])],
        [vi("y", ["N"])], [init("i", np.array([[0], [1]], np.int64))], opset=18, name="scatter_nd_max")

    # Opsets 24 to 28: a decoder step (TensorScatter into caches, Attention reading them with nonpad_kv_seqlen and a
    # sliding window), SwiGLU, CumProd, CausalConvWithState, an antialiased Resize and an irfft, read through their
    # opset-17 forms.
    newest = [helper.make_node("CausalConvWithState", ["x", "cw"], ["h", "state"], name="conv", activation="silu"),
              helper.make_node("CumProd", ["h", "ax"], ["p"], name="running", exclusive=1),
              helper.make_node("SwiGLU", ["p", "x"], ["g"], name="glu", alpha=1.5),
              helper.make_node("Resize", ["g", "", "", "rsz"], ["small"], name="shrink", mode="linear", antialias=1,
                               axes=[2]),
              helper.make_node("Unsqueeze", ["small", "last"], ["bins"], name="as_real"),
              helper.make_node("DFT", ["bins", "", "ax"], ["wave"], name="irfft", inverse=1, onesided=1),
              helper.make_node("TensorScatter", ["ck", "kn", "at"], ["ck2"], name="write", mode="circular"),
              helper.make_node("Attention", ["q", "ck2", "ck2", "", "", "", "seen"], ["a"], name="sdpa", is_causal=1,
                               left_window_size=2)]
    m = model_of(newest, [vi("x", ["N", 2, 5]), vi("q", [2, 2, 1, 4]), vi("kn", [2, 2, 1, 4])],
                 [vi("g", ["N", 2, 5]), vi("state", ["N", 2, 2]), vi("a", [2, 2, 1, 4]), vi("wave", ["N", 2, 4, 1])],
                 [init("cw", weights((2, 1, 3))), init("ax", np.array(2, np.int64)), init("ck", weights((2, 2, 6, 4))),
                  init("rsz", np.array([3], np.int64)), init("last", np.array([-1], np.int64)),
                  init("at", np.array([5, 2], np.int64)), init("seen", np.array([6, 3], np.int64))],
                 opset=28, name="newest")
    m.ir_version = 13
    yield "good_opset28_newest.onnx", m
    m = model_of([helper.make_node("TensorScatter", ["x", "x"], ["y"], name="batch_axis", axis=0)], [vi("x", ["N", 3, 4])],
                 [vi("y", ["N", 3, 4])], opset=24, name="tensor_scatter_batch_axis")
    m.ir_version = 12
    yield "bad_tensor_scatter_batch_axis.onnx", m

    # ONNX Runtime's fused transformer ops (com.microsoft), written in standard ops on load: an optimised BERT layer.
    ms = dict(domain="com.microsoft")
    i32 = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.INT32, shape)
    ort = [helper.make_node("EmbedLayerNormalization", ["ids", "segs", "we", "pe", "se", "g", "b", "mask"], ["emb", "idx"],
                            name="embed", **ms),
           helper.make_node("Attention", ["emb", "qkv", "qkv_b", "idx"], ["att"], name="attn", num_heads=2, **ms),
           helper.make_node("SkipLayerNormalization", ["att", "emb", "g", "b"], ["h"], name="skip_ln", **ms),
           helper.make_node("FastGelu", ["h", "b"], ["act"], name="fast_gelu", **ms),
           helper.make_node("SimplifiedLayerNormalization", ["act", "g"], ["y"], name="rms")]
    m = model_of(ort, [i32("ids", ["N", 3]), i32("segs", ["N", 3]), i32("mask", ["N", 3])], [vi("y", ["N", 3, 4])],
                 [init("we", weights((5, 4))), init("pe", weights((3, 4))), init("se", weights((2, 4))),
                  init("g", np.ones(4, np.float32)), init("b", np.zeros(4, np.float32)), init("qkv", weights((4, 12))),
                  init("qkv_b", np.zeros(12, np.float32))], opset=13, name="ort_bert")
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    yield "good_ort_bert.onnx", m
    m = model_of([helper.make_node("Attention", ["x", "w", "", "m"], ["y"], name="attn4d", num_heads=2, **ms)],
                 [vi("x", ["N", 3, 4]), i32("m", ["N", 1, 3, 3])], [vi("y", ["N", 3, 4])], [init("w", weights((4, 12)))],
                 opset=13, name="ort_attention_4d_mask")
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    yield "bad_ort_attention_4d_mask.onnx", m

    # Inputs a random fuzzer found crashing ONNX 1.12's inference (kept as found).
    probe = os.path.join(HERE, "corpus", "onnx")
    for name in sorted(os.listdir(probe)) if os.path.isdir(probe) else []:
        if name.startswith("bad_found_"):
            yield name, open(os.path.join(probe, name), "rb").read()


# ---- .npy ----

def npy(header, payload):
    header = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + payload


def npy_cases():
    f = np.arange(6, dtype=np.float32).tobytes()
    yield "good_f32_2x3.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f)
    yield "good_scalar.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f[:4])
    yield "good_u8_6.npy", npy("{'descr': '|u1', 'fortran_order': False, 'shape': (6,), }", bytes(6))
    yield "bad_double_comma.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 28, 28,,), }", bytes(6272))
    yield "bad_plus_sign.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (+2, 3), }", f)
    yield "bad_unterminated.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 40) + b"{'descr': '<f4', 'fortran_order': Fals"
    yield "bad_no_newline.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 54) + \
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}" + f[:8]
    yield "bad_huge_shape.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }", f)
    yield "bad_overflow_shape.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", f)
    yield "bad_extra_key.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1, }", f)
    yield "bad_truncated_payload.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f[:10])


# ---- TensorProto .pb ----

def pb_cases():
    x = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "x")
    yield "good_x.pb", x.SerializeToString()
    yield "good_unnamed.pb", numpy_helper.from_array(np.ones(3, np.int64)).SerializeToString()
    yield "bad_name_mismatch.pb", numpy_helper.from_array(np.ones((2, 3), np.float32), "labels").SerializeToString()
    t = TensorProto(name="x", data_type=F32, dims=[10**6, 10**6])
    t.float_data.extend([1.0, 2.0])
    yield "bad_typed_huge.pb", t.SerializeToString()
    t = TensorProto(name="x", data_type=F32, dims=[2**33, 2**33], raw_data=b"\0" * 8)
    yield "bad_raw_overflow.pb", t.SerializeToString()
    # An optional (OptionalProto) or a sequence file given where a tensor is expected.
    opt = onnx.OptionalProto(name="x", elem_type=onnx.OptionalProto.TENSOR, tensor_value=x)
    yield "bad_optional.pb", opt.SerializeToString()
    seq = onnx.SequenceProto(name="x", elem_type=onnx.SequenceProto.TENSOR, tensor_values=[x, x])
    yield "bad_sequence.pb", seq.SerializeToString()


# ---- IDX ----

def idx(dims, payload, type_byte=0x08):
    return bytes([0, 0, type_byte, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def gz(data):
    return gzip.compress(data, mtime=0)


def idx_cases():
    images = idx([2, 4, 4], bytes(range(32)))
    yield "good_images.idx", images
    yield "good_labels.idx", idx([2], bytes([1, 7]))
    yield "good_images.idx.gz", gz(images)
    yield "good_two_members.idx.gz", gz(images[:10]) + gz(images[10:])
    yield "bad_gzip_trailing_garbage.idx.gz", gz(images) + b"garbage!"
    yield "bad_gzip_truncated.idx.gz", gz(images)[:-6]
    yield "bad_huge_dims.idx", idx([2**31 - 1, 2**31 - 1, 2**31 - 1], bytes(16))
    yield "bad_more_data.idx.gz", gz(idx([1, 2, 2], bytes(4)) + bytes(1 << 20))
    yield "bad_rank_9.idx", idx([1] * 9, bytes(1))
    yield "bad_int_type.idx", idx([2], bytes(8), type_byte=0x0C)


# ---- checkpoints ----

def ckpt_payload(meta, tensors):
    def s(b):
        b = b.encode() if isinstance(b, str) else b
        return struct.pack("<I", len(b)) + b
    p = struct.pack("<I", len(meta)) + b"".join(s(k) + s(v) for k, v in sorted(meta.items()))
    p += struct.pack("<I", len(tensors))
    for name, dtype, dims, data in tensors:
        p += s(name) + struct.pack("<iI", dtype, len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
        p += struct.pack("<Q", len(data)) + data
    return p


def ckpt(payload):
    return b"GRCK" + struct.pack("<IQ", 1, len(payload)) + payload + struct.pack("<I", zlib.crc32(payload))


META = {"format": "graphrun-train/1", "epoch": "1", "step": "0", "global_step": "2"}


def ckpt_cases():
    w = np.arange(6, dtype=np.float32).tobytes()
    good = ckpt_payload(META, [("w", 1, [2, 3], w)])
    yield "good_small.grck", ckpt(good)
    yield "good_payload_for_wrap", b"P" + good  # the target wraps it with a valid header and CRC
    flipped = bytearray(ckpt(good))
    flipped[40] ^= 0xFF
    yield "bad_crc.grck", bytes(flipped)
    nan = np.array([1, np.nan, 3, 4, 5, 6], np.float32).tobytes()
    yield "bad_nan_weights.grck", ckpt(ckpt_payload(META, [("w", 1, [2, 3], nan)]))
    yield "bad_dims_wrap.grck", ckpt(ckpt_payload(META, [("w", 1, [2**32, 2**32], b"")]))
    yield "bad_bytes_claim.grck", ckpt(ckpt_payload(META, [("w", 1, [2**20, 2**20], w)]))
    yield "bad_truncated.grck", ckpt(good)[:-9]


# ---- CSV / TSV tables (the fuzz target reads the first byte as the delimiter: "," or a tab) ----

def csv_cases():
    yield "good_classes.csv", b',\xef\xbb\xbfa, "b, c" ,labels\r\n1.5,-2,cat\r\n\r\n3e2,4,"dog ""rex"""\r\n'
    yield "good_numbers.tsv", b'\tx\ty\tlabels\n1\t2\t0.5\n3\t"4"\t7\n'
    yield "good_ids.csv", b',x,labels\n1,0\n2,1\n3,2'
    yield "bad_unclosed_quote.csv", b',a,labels\n1,"0\n2,1\n'
    yield "bad_short_row.csv", b',a,b,labels\n1,2,0\n3,4\n'
    yield "bad_text_feature.csv", b',a,labels\n"two\nlines",0\n'
    yield "bad_missing.csv", b',a,b,labels\n1,NA,0\n'
    # First byte 7: input c int32, by its name, targets read (see fuzz_csv.cc); an ID column of text unread.
    yield "good_groups.csv", b'\x07a,b,c,id,labels\n1,2,3,x,0\n4.5,5,6,y,1\n'


def main():
    for reader, cases in [("onnx", onnx_cases), ("npy", npy_cases), ("pb", pb_cases), ("idx", idx_cases),
                          ("checkpoint", ckpt_cases), ("csv", csv_cases)]:
        for name, data in cases():
            write(reader, name, data)


if __name__ == "__main__":
    main()
