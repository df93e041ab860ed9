#!/usr/bin/python3
# Mutation fuzz of the graphrun command line: thousands of mutated models, .npy/.pb inputs, IDX data
# and checkpoints, each run through the real CLI with a timeout and a memory limit. Prints one table
# of outcomes per input kind (the README's reliability section quotes it) and keeps every input whose
# outcome is not "exit 0" or "exit 2 with one line" under --out for reproduction. Exit code 1 if any
# run crashed, hung, ran out of memory or answered otherwise. Stopped early (SIGTERM, SIGINT), it prints the
# table of the runs that finished, marked partial.
#   tests/fuzz/mutate_cli.py --graphrun build/graphrun --scale 1 --jobs 2
import argparse
import collections
import concurrent.futures as cf
import gzip
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import hostile_models as hm  # noqa: E402

OUTCOMES = ["crash", "hang", "out of memory", "exit 0", "exit 2, one line", "exit 2, more lines", "other"]


def limit_memory(mb):
    def f():
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return f


def run(cmd, cwd, args):
    env = dict(os.environ, GRAPHRUN_MAX_TENSOR_MB=str(args.tensor_mb), OMP_NUM_THREADS="1")
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=args.timeout,
                           preexec_fn=limit_memory(args.memory_mb))
    except subprocess.TimeoutExpired:
        return "hang", ""
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode < 0:
        return "crash", "signal %s" % signal.Signals(-p.returncode).name
    if "out of memory" in err:
        return "out of memory", err.strip()
    if p.returncode == 0:
        return "exit 0", ""
    if p.returncode == 2:
        lines = [l for l in err.split("\n") if l and not l.startswith("warning: ")]
        ok = len(lines) == 1 and lines[0].startswith("graphrun %s: error: " % cmd[1])
        return ("exit 2, one line" if ok else "exit 2, more lines"), err.strip()
    return "other", "exit %d: %s" % (p.returncode, err.strip()[-300:])


class Fuzz:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = tempfile.mkdtemp(prefix="graphrun_mutate_")
        self.counts = collections.defaultdict(collections.Counter)
        self.kept = 0
        self.futures = []  # every run submitted, in order; each recorded once
        self.recorded = set()
        self.stopped = False
        os.makedirs(args.out, exist_ok=True)
        self.lenet = open(os.path.join(ROOT, "models", "lenet.onnx"), "rb").read()
        self.models = [onnx.load_from_string(self.lenet)]
        simplecnn = os.path.join(ROOT, "models", "simplecnn.onnx")
        if os.path.exists(simplecnn):
            self.models.append(onnx.load(simplecnn))
        corpus = os.path.join(HERE, "corpus", "onnx")
        for n in sorted(os.listdir(corpus)):
            if n.startswith("good_"):
                self.models.append(onnx.load(os.path.join(corpus, n)))
        self.image = os.path.join(self.work, "image.npy")
        np.save(self.image, np.random.RandomState(0).rand(2, 1, 28, 28).astype(np.float32))
        self.data = os.path.join(self.work, "data")
        write_mnist(self.data)

    def gr(self, *a):
        return [self.args.graphrun] + list(a)

    # One mutant: write its files into a fresh folder, run each command, count and keep.
    def submit(self, pool, kind, files, commands):
        d = tempfile.mkdtemp(dir=self.work)
        for name, data in files.items():
            p = os.path.join(d, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            if isinstance(data, str):  # a folder to copy
                shutil.copytree(data, p)
            else:
                open(p, "wb").write(data)
        return [pool.submit(self.one, kind, d, c) for c in commands]

    def one(self, kind, d, cmd):
        outcome, detail = run(cmd, d, self.args)
        return kind, cmd, d, outcome, detail

    def record(self, kind, cmd, d, outcome, detail):
        self.counts[kind + " / " + cmd[1]][outcome] += 1
        if outcome not in ("exit 0", "exit 2, one line"):
            self.kept += 1
            keep = os.path.join(self.args.out, "%s_%s_%05d" % (kind, cmd[1], self.kept))
            shutil.copytree(d, keep, dirs_exist_ok=True)
            open(os.path.join(keep, "README"), "w").write("%s\n%s: %s\n" % (" ".join(cmd), outcome, detail))
            print("%s: %s (%s) -> %s" % (outcome, " ".join(cmd[1:]), detail[:200], keep), flush=True)

    def inputs_for(self, model_bytes):
        """--input flags for a (mutated) model: its inputs as declared, unknown sizes 2, at most 1e6 values."""
        files, flags = {}, []
        try:
            m = onnx.load_from_string(model_bytes)
            inits = {t.name for t in m.graph.initializer}
            ins = [v for v in m.graph.input if v.name not in inits]
        except Exception:
            return {}, ["--input", self.image]
        for i, v in enumerate(ins[:4]):
            t = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") and 0 <= d.dim_value <= 64 else 2 for d in t.shape.dim]
            if int(np.prod(dims)) > 10**6:
                dims = [1] * len(dims)
            dtype = hm.NP_OF.get(t.elem_type, np.float32)
            name = "in%d.npy" % i
            import io
            buf = io.BytesIO()
            np.save(buf, np.zeros(dims, dtype=dtype))
            files[name] = buf.getvalue()
            flags += ["--input", "%s=%s" % (v.name, name)]
        return files, flags

    def model_mutant(self, pool, kind, data, commands=("show", "run", "grad")):
        files, flags = self.inputs_for(data)
        files["m.onnx"] = data
        cmds = []
        for c in commands:
            if c == "show":
                cmds.append(self.gr("show", "m.onnx"))
            elif c == "run":
                cmds.append(self.gr("run", "m.onnx", *flags))
            else:
                cmds.append(self.gr("grad", "m.onnx", "-o", "g.onnx"))
        return self.submit(pool, kind, files, cmds)

    def go(self):
        s, rng = self.args.scale, self.rng
        want = lambda kind: not self.args.kinds or kind in self.args.kinds
        futures = self.futures
        pool = cf.ThreadPoolExecutor(self.args.jobs)
        try:
            for _ in range(int(400 * s) if want("bytes") else 0):
                futures += self.model_mutant(pool, "onnx bytes", hm.byte_edit(self.lenet, rng))
            for _ in range(int(500 * s) if want("structured") else 0):
                try:
                    m = hm.structured_edit(rng.choice(self.models), rng)
                    if rng.random() < 0.3:
                        m = hm.structured_edit(m, rng)
                except Exception:  # an edit numpy cannot make on an already broken model
                    continue
                futures += self.model_mutant(pool, "onnx structured", m.SerializeToString())
            for _ in range(int(700 * s) if want("one-op") else 0):
                try:
                    m = hm.random_op_model(rng)
                except Exception:
                    continue
                futures += self.model_mutant(pool, "onnx one-op", m.SerializeToString(), ("show", "run"))
            good_npy = open(self.image, "rb").read()
            for _ in range(int(300 * s) if want("npy") else 0):
                futures += self.submit(pool, "npy", {"x.npy": npy_mutant(good_npy, rng), "lenet.onnx": self.lenet},
                                       [self.gr("run", "lenet.onnx", "--input", "image=x.npy")])
            good_pb = numpy_helper.from_array(np.load(self.image), "image").SerializeToString()
            for _ in range(int(200 * s) if want("pb") else 0):
                futures += self.submit(pool, "pb", {"x.pb": pb_mutant(good_pb, rng), "lenet.onnx": self.lenet},
                                       [self.gr("run", "lenet.onnx", "--input", "image=x.pb")])
            for _ in range(int(250 * s) if want("idx") else 0):
                name, data = idx_mutant(self.data, rng)
                futures += self.submit(pool, "idx", {"data": self.data, "data/" + name: data, "lenet.onnx": self.lenet},
                                       [self.gr("train", "lenet.onnx", "--data", "data", "--epochs", "1",
                                                "--batch-size", "4", "--devices", "cpu:1")])
            self.drain()
            ck = self.checkpoints() if want("checkpoint") else None
            for i in range(int(250 * s) if want("checkpoint") else 0):
                recompute = i % 2 == 1
                files = {"data": self.data, "lenet.onnx": self.lenet, "ck": ck}
                newest = sorted(os.listdir(ck))[-1]
                raw = open(os.path.join(ck, newest), "rb").read()
                files["ck/" + newest] = ckpt_structured(raw, rng) if recompute else hm.byte_edit(raw, rng)
                futures += self.submit(pool, "checkpoint " + ("CRC recomputed" if recompute else "bytes"), files,
                                       [self.gr("train", "lenet.onnx", "--data", "data", "--epochs", "3",
                                                "--batch-size", "4", "--devices", "cpu:1", "--checkpoint-dir", "ck",
                                                "--resume")])
            self.drain()
        except KeyboardInterrupt:  # SIGINT, or SIGTERM (see main)
            self.stopped = True
        # Stopped: what has not started is cancelled, what runs finishes (within --timeout) and is counted.
        pool.shutdown(wait=True, cancel_futures=self.stopped)
        for f in futures:
            if f not in self.recorded and f.done() and not f.cancelled():
                self.recorded.add(f)
                self.record(*f.result())

    def drain(self):
        for f in cf.as_completed([f for f in self.futures if f not in self.recorded]):
            self.recorded.add(f)
            self.record(*f.result())

    def checkpoints(self):
        """Checkpoints of a short run on the tiny data, to mutate: 2 epochs, one per step."""
        d = os.path.join(self.work, "ck")
        open(os.path.join(self.work, "lenet.onnx"), "wb").write(self.lenet)
        p = subprocess.run(self.gr("train", "lenet.onnx", "--data", "data", "--epochs", "2", "--batch-size", "4",
                                   "--devices", "cpu:1", "--checkpoint-dir", d, "--checkpoint-every", "1"),
                           cwd=self.work, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if p.returncode != 0:
            sys.exit("training the checkpoint seed failed: " + p.stderr.decode())
        return d

    def report(self):
        print("\n| input (mutants) / command | runs | " + " | ".join(OUTCOMES) + " |")
        print("|---" * (len(OUTCOMES) + 2) + "|")
        bad = 0
        for key in sorted(self.counts):
            c = self.counts[key]
            print("| %s | %d | %s |" % (key, sum(c.values()), " | ".join(str(c[o]) for o in OUTCOMES)))
            bad += sum(c[o] for o in OUTCOMES if o not in ("exit 0", "exit 2, one line"))
        total = sum(sum(c.values()) for c in self.counts.values())
        print("\n%d runs; %d not 'exit 0' or 'exit 2, one line'%s" %
              (total, bad, "" if not bad else " (kept under %s)" % self.args.out))
        if self.stopped:
            print("partial: stopped by a signal after %d of the %d runs submitted" % (total, len(self.futures)))
        return bad


def write_mnist(d, n_train=8, n_test=4):
    os.makedirs(d, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = bytes([0, 0, 8, 3]) + struct.pack(">III", n, 28, 28) + bytes((i * 37) % 251 for i in range(n * 784))
        labels = bytes([0, 0, 8, 1]) + struct.pack(">I", n) + bytes(i % 10 for i in range(n))
        open(os.path.join(d, prefix + "-images-idx3-ubyte.gz"), "wb").write(gzip.compress(images, mtime=0))
        open(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"), "wb").write(gzip.compress(labels, mtime=0))


def npy_mutant(good, rng):
    hl = struct.unpack("<H", good[8:10])[0]
    header = good[10:10 + hl].decode("latin1")
    if rng.random() < 0.5:
        return hm.byte_edit(good, rng)
    edits = [("(2, 1, 28, 28)", rng.choice(["(2, 1, 28, 28,,)", "(+2, 1, 28, 28)", "(2, 1, 28)", "(2 1 28 28)",
                                             "(99999999999, 1, 28, 28)", "(2, 1, 28, 28, 1)", "()", "(-2, 1, 28, 28)",
                                             "(2, 1, 28, 28", "[2, 1, 28, 28]"])),
             ("'<f4'", rng.choice(["'<f8'", "'>f4'", "'|b1'", "'<c8'", "'f4'", "'<i8'", "'<U10'", "<f4"])),
             ("False", rng.choice(["True", "0", "false", "None"])),
             ("}", rng.choice(["", "}}", ", 'x': 1}"]))]
    old, new = rng.choice(edits)
    header = header.replace(old, new, 1)
    if rng.random() < 0.2:
        header = header[:rng.randrange(len(header))]
    body = good[10 + hl:]
    if rng.random() < 0.3:
        body = body[:rng.randrange(len(body) + 1)]
    return good[:8] + struct.pack("<H", len(header)) + header.encode("latin1") + body


def pb_mutant(good, rng):
    if rng.random() < 0.5:
        return hm.byte_edit(good, rng)
    t = onnx.TensorProto()
    t.ParseFromString(good)
    what = rng.choice(["name", "dims", "dtype", "raw", "typed", "optional", "sequence"])
    if what == "name":
        t.name = rng.choice(["labels", "", "image ", "x"])
    elif what == "dims":
        t.dims[rng.randrange(len(t.dims))] = hm.evil_int(rng)
    elif what == "dtype":
        t.data_type = rng.choice([0, 7, 8, 11, 99, 16])
    elif what == "raw":
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data))]
    elif what == "typed":
        t.ClearField("raw_data")
        t.float_data.extend([1.0] * rng.choice([0, 1, 100]))
    elif what == "optional":
        return onnx.OptionalProto(name="image", elem_type=onnx.OptionalProto.TENSOR, tensor_value=t).SerializeToString()
    else:
        return onnx.SequenceProto(name="image", elem_type=onnx.SequenceProto.TENSOR, tensor_values=[t]).SerializeToString()
    return t.SerializeToString()


def idx_mutant(d, rng):
    name = rng.choice(sorted(os.listdir(d)))
    raw = gzip.decompress(open(os.path.join(d, name), "rb").read())
    what = rng.random()
    if what < 0.3:
        return name, hm.byte_edit(open(os.path.join(d, name), "rb").read(), rng)  # the gzip bytes
    if what < 0.6:
        data = hm.byte_edit(raw[:16], rng) + raw[16:]  # the header
    else:
        data = hm.byte_edit(raw, rng)
    packed = gzip.compress(data, mtime=0)
    if rng.random() < 0.3:
        packed += rng.choice([b"garbage", b"\x1f\x8b", gzip.compress(b"more", mtime=0)])
    return name, packed


def ckpt_structured(raw, rng):
    """Edits a checkpoint's contents and writes a valid CRC over them, as a careful attacker would."""
    payload = bytearray(raw[16:-4])
    what = rng.random()
    if what < 0.4:  # a meta value
        text = bytes(payload)
        for key, vals in ((b"epoch", [b"99999", b"-1", b"x"]), (b"step", [b"1000000000", b"-5"]),
                          (b"global_step", [b"0", b"99999999999999999999"])):
            i = text.find(struct.pack("<I", len(key)) + key)
            if i >= 0 and rng.random() < 0.5:
                j = i + 4 + len(key)
                n = struct.unpack("<I", text[j:j + 4])[0]
                v = rng.choice(vals)
                text = text[:j] + struct.pack("<I", len(v)) + v + text[j + 4 + n:]
        payload = bytearray(text)
    elif what < 0.7:  # a float becomes NaN or Inf somewhere in the tensor data
        i = rng.randrange(len(payload) // 2, len(payload) - 4)
        payload[i:i + 4] = struct.pack("<f", rng.choice([float("nan"), float("inf")]))
    else:  # a dimension or a byte count of some tensor
        i = rng.randrange(0, len(payload) - 8)
        payload[i:i + 8] = struct.pack("<q", rng.choice([2**32, -1, 2**62, 0]))
    payload = bytes(payload)
    return raw[:8] + struct.pack("<Q", len(payload)) + payload + struct.pack("<I", zlib.crc32(payload))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--graphrun", default=os.path.join(ROOT, "build", "graphrun"))
    ap.add_argument("--scale", type=float, default=1.0, help="mutants per kind, relative to the default counts")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--memory-mb", type=int, default=4096)
    ap.add_argument("--tensor-mb", type=int, default=1024, help="GRAPHRUN_MAX_TENSOR_MB for the runs")
    ap.add_argument("--out", default="mutate_findings")
    ap.add_argument("--kinds", nargs="*", default=[],
                    help="only these: bytes structured one-op npy pb idx checkpoint (default: all)")
    args = ap.parse_args()
    args.graphrun = os.path.abspath(args.graphrun)
    f = Fuzz(args)

    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    try:
        f.go()
    finally:
        shutil.rmtree(f.work, ignore_errors=True)
    sys.exit(1 if f.report() else 0)


if __name__ == "__main__":
    main()
