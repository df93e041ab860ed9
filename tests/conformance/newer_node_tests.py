#!/usr/bin/python3
"""Runs the node-test cases of a newer ONNX source tree through `graphrun run`, for the ops graphrun reads from
opsets 18 to 28 by rewriting them into opset 17 (graph/opset_lowering.cc), which onnx 1.12's own test data (the
conformance runner's) predates.

  /usr/bin/python3 tests/conformance/newer_node_tests.py ONNX_SOURCE_TREE build/graphrun [CASE_FILE ...]

Each case file (onnx/backend/test/case/node/NAME.py of the tree; default: the ops below) is executed as ONNX's
generator executes it, its `expect(node, inputs, outputs, name, opset_imports)` calls collected: the reference
outputs come from the tree's own reference implementation (onnx/reference/ops, loaded from the tree). Each case
becomes a one-node model run by graphrun; the outputs are compared with the reference as ONNX's backend runner
compares them (|got - ref| <= 1e-7 + 1e-3 |ref|; NaN where the reference has NaN, the same infinities; the figure
printed is the largest |got - ref| / (1e-7 + 1e-3 |ref|), at most 1 to pass). One line per case: OK, MISMATCH,
REFUSED (graphrun's one-line error, e.g. an op with no opset-17 form; a case that names no opset is run at 28) or GENERATOR (the case file needs a newer onnx than the
installed one to build its inputs), then the counts. Nothing is copied from the tree: it is read where it lies.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np
import onnx
from onnx import helper

DEFAULT = ["attention", "rotaryembedding", "rmsnormalization", "scatterelements", "gelu", "mish", "lpnormalization",
           "groupnormalization", "col2im", "affinegrid", "dft", "pad", "split", "reducemean", "reducemax",
           "reducel2", "resize", "averagepool", "lppool", "gridsample", "swish", "swiglu", "tensorscatter", "cumprod",
           "causal_conv_with_state", "bitcast", "linear_attention"]


NEWEST = 28  # graph/opset_lowering.h: kMaxLoweredOpset


def tensor_type(a):
    return onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[a.dtype]


class Runner:
    def __init__(self, graphrun, work):
        self.graphrun, self.work, self.results = graphrun, work, []

    def expect(self, node, inputs, outputs, name, opset_imports=None, **_):
        d = os.path.join(self.work, name)
        os.makedirs(d, exist_ok=True)
        # As ONNX's expect pairs them: the values with the node's non-empty inputs and outputs, in order.
        given = [(n, np.asarray(a)) for n, a in zip([n for n in node.input if n], inputs)]
        wanted = [(n, np.asarray(a)) for n, a in zip([n for n in node.output if n], outputs)]
        if any(a.dtype == object or a.dtype.kind in "US" for _, a in given + wanted):
            self.results.append((name, "-", "REFUSED", "string tensors"))
            return
        # ONNX writes a case without opset_imports at its newest opset: here the newest graphrun reads.
        opsets = opset_imports or [helper.make_opsetid("", NEWEST)]
        opset = max(o.version for o in opsets if o.domain in ("", "ai.onnx"))
        try:
            g = helper.make_graph([node], name, [helper.make_tensor_value_info(n, tensor_type(a), list(a.shape))
                                                 for n, a in given],
                                  [helper.make_tensor_value_info(n, tensor_type(a), list(a.shape)) for n, a in wanted])
        except KeyError as e:
            self.results.append((name, opset, "REFUSED", "a type onnx 1.12 lacks: %s" % e))
            return
        m = helper.make_model(g, opset_imports=opsets)
        m.ir_version = 13 if opset >= 25 else 12 if opset >= 24 else 11 if opset >= 23 else 10 if opset >= 21 else 9 if opset >= 19 else 8
        onnx.save(m, os.path.join(d, "model.onnx"))
        args = [self.graphrun, "run", os.path.join(d, "model.onnx"), "--output-dir", os.path.join(d, "got")]
        for n, a in given:
            np.save(os.path.join(d, n + ".npy"), a)
            args += ["--input", n + "=" + os.path.join(d, n + ".npy")]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            line = [l for l in r.stderr.splitlines() if "error" in l] or [r.stderr.strip()]
            self.results.append((name, opset, "REFUSED", line[-1].split(": error: ")[-1][-160:]))
            return
        worst, where = 0.0, ""
        for n, a in wanted:
            got = np.load(os.path.join(d, "got", re.sub(r"[^A-Za-z0-9._-]", "_", n) + ".npy"))
            if got.shape != a.shape:
                self.results.append((name, opset, "MISMATCH", "%s: shape %s, want %s" % (n, got.shape, a.shape)))
                return
            if a.dtype.kind not in "fc":
                err = 0.0 if np.array_equal(got, a) else float("inf")
            else:
                w, g64 = a.astype(np.float64), got.astype(np.float64)
                same = (np.isnan(w) & np.isnan(g64)) | (np.isinf(w) & (w == g64))
                with np.errstate(invalid="ignore"):
                    diff = np.where(same, 0.0, np.abs(w - g64) / (1e-7 + 1e-3 * np.abs(np.where(same, 0, w))))
                err = float(np.max(np.where(np.isnan(diff), np.inf, diff))) if diff.size else 0.0
            if err > worst:
                worst, where = err, n
        self.results.append((name, opset, "OK" if worst <= 1 else "MISMATCH", "%s %.2g" % (where, worst)))


def install_shims(tree, runner):
    """onnx.backend.test.case.{base,node} and onnx.reference.* as the case files import them, from the tree."""
    base = types.ModuleType("onnx.backend.test.case.base")
    base.Base = type("Base", (), {})
    node = types.ModuleType("onnx.backend.test.case.node")
    node.expect = runner.expect
    op_run = types.ModuleType("onnx.reference.op_run")
    op_run.OpRun = type("OpRun", (), {})
    op_run.RuntimeTypeError = type("RuntimeTypeError", (RuntimeError,), {})
    reference = types.ModuleType("onnx.reference")
    reference.__path__ = []
    ops = types.ModuleType("onnx.reference.ops")
    ops.__path__ = [os.path.join(tree, "onnx", "reference", "ops")]
    for name, mod in [("onnx.backend.test.case.base", base), ("onnx.backend.test.case.node", node),
                      ("onnx.reference", reference), ("onnx.reference.op_run", op_run), ("onnx.reference.ops", ops)]:
        sys.modules[name] = mod


def run_case_file(tree, name, runner):
    path = os.path.join(tree, "onnx", "backend", "test", "case", "node", name + ".py")
    spec = importlib.util.spec_from_file_location("newer_case_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - a case file needing a newer onnx is reported, not fatal
        runner.results.append((name + ".py", "-", "GENERATOR", repr(e)[:160]))
        return
    for cls in [c for c in vars(mod).values() if isinstance(c, type) and c.__module__ == mod.__name__]:
        for attr, fn in vars(cls).items():
            if not attr.startswith("export"):
                continue
            np.random.seed(0)
            try:
                fn.__func__() if hasattr(fn, "__func__") else fn()
            except Exception as e:  # noqa: BLE001
                runner.results.append((cls.__name__ + "." + attr, "-", "GENERATOR", repr(e)[:160]))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tree, graphrun = sys.argv[1], os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="newer_node_tests_")
    runner = Runner(graphrun, work)
    install_shims(tree, runner)
    for name in sys.argv[3:] or DEFAULT:
        run_case_file(tree, name, runner)
    for r in runner.results:
        print("%-72s opset %-3s %-9s %s" % r)
    counts = {}
    for r in runner.results:
        counts[r[2]] = counts.get(r[2], 0) + 1
    print("newer node tests: " + ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
