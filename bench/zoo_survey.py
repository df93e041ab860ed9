#!/usr/bin/python3
"""The torchvision classification zoo through graphrun's command line: the smallest model of each family (random
weights, exported by tests/zoo_parity.py) at opsets 13, 15 and 17, the eval export's forward against model.eval() and
the training export's gradients (`graphrun grad` + `graphrun run`) against torch autograd in float64.

usage: zoo_survey.py [--models a,b,...] [--opsets 13,15,17] [--graphrun PATH] [--work DIR] [--size S] [--jobs N]
One line per model and opset (parameters, the forward's error, the worst gradient's error over its tolerance,
PASS/FAIL or graphrun's one-line error), then a summary line; exit 1 if any failed. The README's table is its output.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The smallest model of each family and the smallest input at which it is well-conditioned: at 32x32 most CNNs end
# in a 1x1 map, and training-mode BatchNorm over 2 values is so ill-conditioned that torch's own float32 and float64
# disagree (tests/zoo_test.cc, ShuffleNet); Inception v3 needs 75x75 at least.
MODELS = {
    'resnet18': 64, 'resnext50_32x4d': 64, 'mobilenet_v2': 64, 'mobilenet_v3_small': 64, 'efficientnet_b0': 64,
    'regnet_x_400mf': 64, 'regnet_y_400mf': 64, 'mnasnet0_5': 64, 'shufflenet_v2_x0_5': 64, 'squeezenet1_1': 64,
    'densenet121': 64, 'googlenet': 64, 'inception_v3': 96, 'convnext_tiny': 32, 'vit_b_16': 32, 'swin_t': 32,
}

# Forward and loss within 1e-4 of max(1, the reference's scale), as tests/zoo_test.cc judges them.
FORWARD_TOLERANCE = 1e-4


def sanitize(name):
    """The file name `graphrun run --output-dir` gives an output."""
    return re.sub(r'[^A-Za-z0-9._-]', '_', name)


def one_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else '(no message)'


def command(cmd, timeout):
    """Runs cmd; returns None on success, else its last line of output (graphrun's one-line error)."""
    try:
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return f'timed out after {timeout} s'
    return None if p.returncode == 0 else one_line(p.stdout)


def float64_copy(src, dst):
    """The model in float64, as `graphrun check` makes its copy: f32 initializers, value types, Cast targets and
    constants become f64, LayerNormalization's statistics too."""
    f32, f64 = onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE

    def to64(t):
        return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)
    m = onnx.load(src)
    g = m.graph
    for t in g.initializer:
        if t.data_type == f32:
            t.CopyFrom(to64(t))
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == f32:
            vi.type.tensor_type.elem_type = f64
    for n in g.node:
        if n.domain not in ('', 'ai.onnx'):
            continue
        for a in list(n.attribute):
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == f32:
                a.t.CopyFrom(to64(a.t))
            elif a.name in ('to', 'dtype') and a.type == onnx.AttributeProto.INT and a.i == f32:
                a.i = f64
            elif n.op_type == 'LayerNormalization' and a.name == 'stash_type':
                a.i = f64
            elif n.op_type == 'Constant' and a.name in ('value_float', 'value_floats'):
                v = np.array(a.f if a.name == 'value_float' else list(a.floats), dtype=np.float64)
                n.attribute.remove(a)
                n.attribute.append(onnx.helper.make_attribute('value', numpy_helper.from_array(v)))
    onnx.save(m, dst)


def gradient_errors(got_dir, ref_dir, params):
    """Each gradient's error relative to its own scale floored at 1e-3 of the model's largest gradient (a bias
    before a training-mode BatchNorm has an exact-zero gradient: float noise on both sides), as tests/zoo_test.cc
    measures it: ({parameter: error}, None) or (None, why a gradient is missing)."""
    refs = {p: np.load(os.path.join(ref_dir, p + '.npy')).astype(np.float64) for p in params}
    model_scale = max(float(np.abs(g).max(initial=0)) for g in refs.values())
    errors = {}
    for p, want in refs.items():
        path = os.path.join(got_dir, sanitize(p + '_grad') + '.npy')
        if not os.path.exists(path):
            return None, f'no gradient output for {p}'
        got = np.load(path).astype(np.float64)
        if got.shape != want.shape:
            return None, f'gradient of {p} has shape {list(got.shape)}, torch {list(want.shape)}'
        scale = max(float(np.abs(want).max(initial=0)), 1e-3 * model_scale)
        errors[p] = float(np.abs(got - want).max(initial=0)) / scale
    return errors, None


def float32_errors(ref_dir):
    """Torch float32's own error on each gradient, as tests/zoo_parity.py measured it."""
    f32_error = {}
    with open(os.path.join(ref_dir, 'float32_errors.txt')) as f:
        for line in f:
            name, err = line.split()
            f32_error[name] = float(err)
    return f32_error


def worst_ratio(errors, ref_dir):
    """The worst gradient's error over its tolerance (<= 1 passes) and its parameter, by tests/zoo_test.cc's rule:
    within max(1e-4, 10x torch float32's own error), since graphrun computes in float32 too."""
    f32_error = float32_errors(ref_dir)
    return max((e / max(1e-4, 10 * f32_error[p]), p) for p, e in errors.items())


def training_run(graphrun, train_onnx, image, labels, out, timeout):
    """`graphrun grad` then `graphrun run` of the gradient model into out/: None or the failing step's line."""
    grad_onnx = os.path.join(os.path.dirname(out), os.path.basename(out) + '.onnx')
    err = command([graphrun, 'grad', train_onnx, '-o', grad_onnx], timeout)
    if err:
        return f'grad {os.path.basename(train_onnx)}: {err}'
    err = command([graphrun, 'run', grad_onnx, '--input', 'image=' + image, '--input', 'labels=' + labels,
                   '--output-dir', out], timeout)
    return f'run {os.path.basename(grad_onnx)}: {err}' if err else None


def survey(model, opset, size, graphrun, work, timeout):
    """One model at one opset: (passed, the table's line)."""
    d = os.path.join(work, f'{model}_{opset}')
    os.makedirs(d, exist_ok=True)
    start = time.time()
    head = f'{model:<20} opset {opset}  size {size:>3}'

    def fail(stage, msg):
        return False, f'{head}  FAIL {stage}: {msg}  ({time.time() - start:.0f} s)'

    err = command([sys.executable, os.path.join(ROOT, 'tests', 'zoo_parity.py'), model, d, '--opset', str(opset),
                   '--size', str(size)], timeout)
    if err:
        return fail('torch export', err)
    with open(os.path.join(d, 'params.txt')) as f:
        params = [line.strip() for line in f if line.strip()]
    count = sum(np.load(os.path.join(d, p + '.npy'), mmap_mode='r').size for p in params)
    head += f'  {count / 1e6:6.2f}M params'
    image = os.path.join(d, 'image.npy')

    # Forward: the eval-mode export against model.eval().
    err = command([graphrun, 'run', os.path.join(d, 'eval.onnx'), '--input', 'image=' + image, '--output-dir',
                   os.path.join(d, 'eval_out')], timeout)
    if err:
        return fail('run eval.onnx', err)
    want = np.load(os.path.join(d, 'logits.npy')).astype(np.float64)
    got = np.load(os.path.join(d, 'eval_out', 'logits.npy')).astype(np.float64)
    forward = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))

    # Gradients: the training-mode export with graphrun's loss and backward graph against torch autograd.
    out = os.path.join(d, 'grad')
    labels = os.path.join(d, 'labels.npy')
    err = training_run(graphrun, os.path.join(d, 'train.onnx'), image, labels, out, timeout)
    if err:
        stage, msg = err.split(': ', 1)
        return fail(stage, msg)
    loss_want = float(np.load(os.path.join(d, 'loss.npy')))
    loss = abs(float(np.load(os.path.join(out, 'loss.npy'))) - loss_want) / max(1.0, abs(loss_want))
    errors, why = gradient_errors(out, d, params)
    if errors is None:
        return fail('gradients', why)
    ratio, where = worst_ratio(errors, d)
    note = ''
    if ratio > 1:
        # Is it graphrun's math or float32's conditioning? The same export in float64 tells them apart: right
        # rules and kernels agree with torch's float64 to the references' own float32 rounding.
        float64_copy(os.path.join(d, 'train.onnx'), os.path.join(d, 'train64.onnx'))
        image64 = os.path.join(d, 'image64.npy')
        np.save(image64, np.load(image).astype(np.float64))
        out64 = os.path.join(d, 'grad64')
        err = training_run(graphrun, os.path.join(d, 'train64.onnx'), image64, labels, out64, timeout)
        errors64 = gradient_errors(out64, d, params)[0] if not err else None
        note = (f'  [float64 copy: {err}]' if err else
                f'  [float64 copy: gradients {max(errors64.values()):.1e} of torch float64\'s]')
        # The rule compares each gradient with torch float32's error on that same gradient, which in an
        # ill-conditioned model is small on some by chance: the worst over the model puts the two side by side.
        note += (f'  [float32 worst over the model: graphrun {max(errors.values()):.1e}, '
                 f'torch {max(float32_errors(d).values()):.1e}]')
    extra = sorted(f[:-len('_grad.npy')] for f in os.listdir(out)
                   if f.endswith('_grad.npy') and f[:-len('_grad.npy')] not in {sanitize(p) for p in params})
    ok = forward <= FORWARD_TOLERANCE and loss <= FORWARD_TOLERANCE and ratio <= 1 and not extra
    line = (f'{head}  forward {forward:.1e}  loss {loss:.1e}  gradients {ratio:.3f} ({where})  '
            f'{"PASS" if ok else "FAIL"}{note}')
    if extra:
        line += f'  (graphrun also trains {", ".join(extra)}, torch does not)'
    return ok, line + f'  ({time.time() - start:.0f} s)'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--models', default=','.join(MODELS),
                    help='comma-separated torchvision builders (or tests/zoo_parity.py names); default: the zoo')
    ap.add_argument('--opsets', default='13,15,17')
    ap.add_argument('--graphrun', default=os.path.join(ROOT, 'build', 'graphrun'))
    ap.add_argument('--work', default=os.path.join(ROOT, 'build', 'zoo_survey'),
                    help='folder for the exports and outputs (one subfolder per model and opset)')
    ap.add_argument('--size', type=int, help='input size for every model (default: each family\'s, see MODELS)')
    ap.add_argument('--timeout', type=int, default=3600, help='seconds per command')
    ap.add_argument('--jobs', type=int, default=1, help='models surveyed at once (lines still print in order)')
    a = ap.parse_args()
    if not os.access(a.graphrun, os.X_OK):
        sys.exit(f'zoo_survey: no graphrun binary at {a.graphrun} (--graphrun)')
    models = [m for m in a.models.split(',') if m]
    opsets = [int(o) for o in a.opsets.split(',') if o]
    print(f'# bench/zoo_survey.py --models {",".join(models)} --opsets {",".join(map(str, opsets))}'
          + (f' --size {a.size}' if a.size else ''), flush=True)
    cases = [(m, o) for m in models for o in opsets]
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = [pool.submit(survey, m, o, a.size or MODELS.get(m, 64), a.graphrun, a.work, a.timeout)
                   for m, o in cases]
        for (model, opset), r in zip(cases, results):
            ok, line = r.result()
            print(line, flush=True)
            if not ok:
                failed.append(f'{model}@{opset}')
    total = len(cases)
    print(f'zoo survey: {total - len(failed)} of {total} PASS' + (f'; FAIL: {" ".join(failed)}' if failed else ''))
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
