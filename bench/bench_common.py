"""What the benchmark drivers share: the repository root and running one training command."""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = re.compile(r'test acc: ([0-9.]+), ([0-9.]+) sec/epoch')
EPOCH_SEC = re.compile(r'^\s*epoch \d+/\d+ .* ([0-9.]+) sec/epoch', re.M)  # the yardstick's epoch lines


def run(name, cmd):
    """Runs a trainer (graphrun or the PyTorch yardstick) from the repository root, echoes its epoch
    lines and returns (test accuracy, sec/epoch). The closing line rounds sec/epoch to 0.1 s, too
    coarse for a half-second epoch, so sec/epoch is the mean over epochs of graphrun's --metrics
    "seconds" (ms) or of the yardstick's epoch lines (10 ms); the closing line is the fallback."""
    print(f'--- {name}: {" ".join(cmd)}', flush=True)
    metrics = None
    if 'train' in cmd and ':' not in cmd and '--metrics' not in cmd and not cmd[0].endswith('python3'):
        fd, metrics = tempfile.mkstemp(suffix='.jsonl')
        os.close(fd)
        cmd = cmd + ['--metrics', metrics]
    try:
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        epochs = []
        if metrics and os.path.exists(metrics):
            with open(metrics) as f:
                epochs = [json.loads(line)['seconds'] for line in f if line.strip()]
    finally:
        if metrics and os.path.exists(metrics):
            os.unlink(metrics)
    for line in p.stdout.splitlines():
        if line.startswith('epoch') or line.startswith('test acc'):
            print('    ' + line, flush=True)
    if not epochs:
        epochs = [float(x) for x in EPOCH_SEC.findall(p.stdout)]
    m = None
    for m in SUMMARY.finditer(p.stdout):
        pass
    if p.returncode != 0 or not m:
        print(p.stdout[-2000:], file=sys.stderr)
        sys.exit(f'{name} failed (exit {p.returncode})')
    return float(m.group(1)), (sum(epochs) / len(epochs) if epochs else float(m.group(2)))


def run_rounds(rows, repeats):
    """Runs every (label, cmd) of the dict `rows` in order, `repeats` rounds of them, so that a slow spell of
    the machine falls on every row alike; returns {name: (test accuracy of the last run, median sec/epoch)}
    and prints each row's runs."""
    import statistics
    secs, acc = {k: [] for k in rows}, {}
    for i in range(repeats):
        for k, (label, cmd) in rows.items():
            acc[k], sec = run(label + (f' ({i + 1}/{repeats})' if repeats > 1 else ''), cmd)
            secs[k].append(sec)
    if repeats > 1:
        for k, v in secs.items():
            print(f'{k}: ' + ', '.join(f'{x:.3f}' for x in v) + f' sec/epoch, median {statistics.median(v):.3f}')
    return {k: (acc[k], statistics.median(v)) for k, v in secs.items()}


def overlap_ab(name, cmd, pairs):
    """Runs `cmd` (a graphrun train command) with --overlap-allreduce off and on, alternating, `pairs`
    times each; prints both medians and returns them as (sec off, sec on)."""
    import statistics
    secs = {'off': [], 'on': []}
    for i in range(pairs):
        for mode in ('off', 'on'):
            secs[mode].append(run(f'{name}, --overlap-allreduce {mode} ({i + 1}/{pairs})',
                                  cmd + ['--overlap-allreduce', mode])[1])
    off, on = statistics.median(secs['off']), statistics.median(secs['on'])
    print(f'{name}: AllReduce overlap off {off:.2f}, on {on:.2f} sec/epoch (medians of {pairs}): '
          f'on takes {100 * (on / off - 1):+.0f}% time')
    return off, on


def fma_floor(graphrun, model, batch, steps, cores=2, extra=()):
    """The FMA floor of `steps` training steps: the graph's FLOPs (graphrun plan: Conv, ConvGrad, Gemm,
    MatMul, a multiply-add counting two) over `cores` cores at the FMA peak bench_gemm --peak measures
    on this machine, now. Prints the figures and returns the floor in seconds (None when bench_gemm
    is not built)."""
    import json
    gemm = os.path.join(os.path.dirname(graphrun), 'bench', 'bench_gemm')
    if not os.path.exists(os.path.join(ROOT, gemm)):
        print(f'(no FMA floor: {gemm} is not built)')
        return None
    out = subprocess.run([gemm, '--peak'], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout
    m = re.search(r'two threads at once: ([0-9.]+) and ([0-9.]+) per thread', out)
    peak = sum(float(x) for x in m.groups()[:cores]) if cores <= 2 else float(m.group(1)) * cores
    plan = subprocess.run([graphrun, 'plan', model, '--batch-size', str(batch), '--device-tflops', '1', '--json',
                           *extra], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout
    flops = json.loads(plan)['flops_per_step'] * steps
    floor = flops / (peak * 1e9)
    print(f'FMA floor: {flops / 1e12:.2f} TFLOP in {steps} steps at {peak:.0f} GFLOP/s ({cores} cores at once, '
          f'measured now) = {floor:.2f} s')
    return floor
