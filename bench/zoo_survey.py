#!/usr/bin/python3
"""The torchvision classification zoo through graphrun's command line: the smallest model of each family (random
weights, exported by tests/zoo_parity.py) at opsets 13, 15 and 17, the eval export's forward against model.eval() and
the training export's gradients (`graphrun grad` + `graphrun run`) against torch autograd in float64.

usage: zoo_survey.py [--models a,b,...] [--opsets 13,15,17] [--graphrun PATH] [--work DIR] [--size S] [--jobs N]
One line per model and opset (parameters, the forward's error, the worst gradient's error over its tolerance,
PASS/FAIL or graphrun's one-line error), then a summary line; exit 1 if any failed. The README's table is its output.

The rule: each gradient within max(1e-4, 10x torch float32's own error on it) of torch's float64 (tests/zoo_test.cc's).
A model that breaks it passes as "PASS (same branches)" only if (1) graphrun's float64 copy of the export matches torch's
float64 within MATH_TOLERANCE (the math), (2) every ReLU element whose float32 mask differs from float64's has a
float32 pre-activation within max(FORWARD_TOLERANCE of max(1, its tensor's scale), torch float32's own largest error on
that same ReLU input against torch float64, relu_float32_errors.txt) of float64's (a value float64 puts within
float32's rounding of the kink, not a wrong forward), and (3) graphrun's float32 gradients are within the same per-
gradient tolerance of its float64 copy run on the float32 run's ReLU masks. ReLU's gradient jumps at 0: which side a
near-zero pre-activation lands on in float32 is chance (torch lands on its own), and one flipped element changes
its BatchNorm's gradients at O(1) and every gradient before it. Other kinks (max pooling, Clip) are not excused.
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


def gradient_errors(got_dir, ref_dir, params, ref_suffix=''):
    """Each gradient's error relative to its own scale floored at 1e-3 of the model's largest gradient (a bias
    before a training-mode BatchNorm has an exact-zero gradient: float noise on both sides), as tests/zoo_test.cc
    measures it: ({parameter: error}, None) or (None, why a gradient is missing). The references: torch's
    (ref_dir/<parameter>.npy), or with ref_suffix='_grad' another graphrun run's outputs."""
    refs = {p: np.load(os.path.join(ref_dir, sanitize(p + ref_suffix) + '.npy')).astype(np.float64) for p in params}
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


def relu_float32_errors(ref_dir):
    """Torch float32's own largest absolute error on each ReLU's input (by its name in the training export), as
    tests/zoo_parity.py measured it; {} when it could not pair torch's ReLUs with the export's."""
    path = os.path.join(ref_dir, 'relu_float32_errors.txt')
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {name: float(err) for name, err in (line.split() for line in f if line.strip())}


def worst_ratio(errors, ref_dir):
    """The worst gradient's error over its tolerance (<= 1 passes) and its parameter, by tests/zoo_test.cc's rule:
    within max(1e-4, 10x torch float32's own error), since graphrun computes in float32 too."""
    f32_error = float32_errors(ref_dir)
    return max((e / max(1e-4, 10 * f32_error[p]), p) for p, e in errors.items())


# The float64 copy's gradients against torch's float64: the references' own float32 rounding (they are stored as f32)
# and no more, else graphrun's math is wrong and no float32 argument can excuse a FAIL.
MATH_TOLERANCE = 1e-6


def with_outputs(src, dst, outputs, shapes, elem_type, drop=(), constants=None):
    """src with `outputs` (if not None) as its graph outputs, typed elem_type(name), of the ranks in shapes; the
    nodes producing the names in drop removed and those values given as initializers from constants."""
    m = onnx.load(src)
    if outputs is not None:
        del m.graph.output[:]
    for name in outputs or []:
        m.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_type(name),
                                                                 [f'{name}_d{i}' for i in range(shapes[name])]))
    if drop:
        kept = [n for n in m.graph.node if not set(n.output) & set(drop)]
        del m.graph.node[:]
        m.graph.node.extend(kept)
        m.graph.initializer.extend(numpy_helper.from_array(constants[name], name) for name in drop)
    onnx.save(m, dst)


def relu_sites(grad_onnx, train_onnx):
    """The ReLUs whose gradient mask `Greater(Relu's output, 0)` the gradient graph computes: {mask: pre-activation}
    and each pre-activation's rank (from ONNX's shape inference of the forward model)."""
    m = onnx.load(grad_onnx)
    pre = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == 'Relu'}
    inferred = onnx.shape_inference.infer_shapes(onnx.load(train_onnx))
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in list(inferred.graph.value_info) + list(inferred.graph.input)
             if v.type.tensor_type.HasField('shape')}
    sites = {n.output[0]: pre[n.input[0]] for n in m.graph.node
             if n.op_type == 'Greater' and n.input[0] in pre and pre[n.input[0]] in ranks}
    ranks = {k: ranks[x] for k, x in sites.items()} | {x: ranks[x] for x in sites.values()}
    return sites, ranks


def same_branch_check(graphrun, d, image, image64, labels, timeout):
    """ReLU's gradient is discontinuous at 0: a pre-activation that float64 puts within float32's rounding of 0 may
    land on the other side in float32, and its mask then adds or drops a whole dY element, whatever precision the rest
    has. Which way it lands is chance (torch's float32 takes its own side). So: run the float64 copy's gradient graph
    on the ReLU masks of graphrun's float32 run (the same branches), and report every mask that differs from float64's
    with the largest float32 error of its pre-activation there, against its bound: max(FORWARD_TOLERANCE of max(1, the
    tensor's scale), torch float32's own largest error on that ReLU input). Returns (flipped, sites, worst float32 error
    at a flip relative to max(1, its tensor's scale), the worst such error over its bound, the same-branch gradients'
    directory) or a one-line error."""
    sites, ranks = relu_sites(os.path.join(d, 'grad.onnx'), os.path.join(d, 'train.onnx'))
    if not sites:
        return 'no ReLU masks in the gradient graph'
    pre = sorted(set(sites.values()))
    f32, f64, boolean = onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.BOOL
    runs = {}
    for tag, model, img, outs, typ in (
            ('32', 'grad.onnx', image, pre + sorted(sites), lambda n: boolean if n in sites else f32),
            ('64', 'grad64.onnx', image64, pre, lambda n: f64)):
        probe = os.path.join(d, f'branches{tag}.onnx')
        with_outputs(os.path.join(d, model), probe, outs, ranks, typ)
        err = command([graphrun, 'run', probe, '--input', 'image=' + img, '--input', 'labels=' + labels,
                       '--output-dir', os.path.join(d, f'branches{tag}')], timeout)
        if err:
            return f'run {os.path.basename(probe)}: {err}'
        runs[tag] = {n: np.load(os.path.join(d, f'branches{tag}', sanitize(n) + '.npy')) for n in outs}
    torch_error = relu_float32_errors(d)
    flipped, worst, worst_bound = 0, 0.0, 0.0
    for mask, x in sites.items():
        x32, x64 = runs['32'][x].astype(np.float64), runs['64'][x]
        if not np.array_equal(runs['32'][mask], x32 > 0):
            return f'mask {mask} is not its pre-activation > 0'
        flip = (x32 > 0) != (x64 > 0)
        if flip.any():
            flipped += int(flip.sum())
            error, scale = float(np.abs(x32 - x64)[flip].max()), max(1.0, float(np.abs(x64).max()))
            worst = max(worst, error / scale)
            worst_bound = max(worst_bound, error / max(FORWARD_TOLERANCE * scale, torch_error.get(x, 0.0)))
    same = os.path.join(d, 'grad64_same_branch.onnx')
    with_outputs(os.path.join(d, 'grad64.onnx'), same, None, {}, None, drop=sorted(sites),
                 constants={m: runs['32'][m].astype(bool) for m in sites})
    out = os.path.join(d, 'grad64_same_branch')
    err = command([graphrun, 'run', same, '--input', 'image=' + image64, '--input', 'labels=' + labels,
                   '--output-dir', out], timeout)
    if err:
        return f'run {os.path.basename(same)}: {err}'
    return flipped, len(sites), worst, worst_bound, out


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
    d = os.path.abspath(os.path.join(work, f'{model}_{opset}'))  # graphrun runs in ROOT
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
    same_branch_pass = False
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
        if errors64 and max(errors64.values()) <= MATH_TOLERANCE:
            # The math is right; is the FAIL float32 landing on the other side of a ReLU than float64 does?
            branch = same_branch_check(graphrun, d, image, image64, labels, timeout)
            if isinstance(branch, str):
                note += f'  [same-branch check: {branch}]'
            else:
                flipped, sites, flip_error, flip_bound, same_dir = branch
                same_errors, why = gradient_errors(out, same_dir, params, ref_suffix='_grad')
                if same_errors is None:
                    note += f'  [same-branch check: {why}]'
                else:
                    same_ratio, same_where = worst_ratio(same_errors, d)
                    note += (f'  [ReLU masks: {flipped} element(s) of {sites} ReLUs on the other side of 0 than in '
                             f'float64, float32 within {flip_error:.1e} there, {flip_bound:.2f} of its bound'
                             f'{"" if relu_float32_errors(d) else " (1e-4: no torch ReLU errors)"}; float64 on '
                             f'float32\'s masks: gradients {same_ratio:.3f} ({same_where})]')
                    same_branch_pass = same_ratio <= 1 and flip_bound <= 1
    extra = sorted(f[:-len('_grad.npy')] for f in os.listdir(out)
                   if f.endswith('_grad.npy') and f[:-len('_grad.npy')] not in {sanitize(p) for p in params})
    ok = forward <= FORWARD_TOLERANCE and loss <= FORWARD_TOLERANCE and (ratio <= 1 or same_branch_pass) and not extra
    verdict = 'FAIL' if not ok else 'PASS' if ratio <= 1 else 'PASS (same branches)'
    line = f'{head}  forward {forward:.1e}  loss {loss:.1e}  gradients {ratio:.3f} ({where})  {verdict}{note}'
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
