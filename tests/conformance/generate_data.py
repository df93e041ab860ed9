#!/usr/bin/python3
"""Generates the ONNX backend node test data (model.onnx + test_data_set_*/*.pb per case) from the
installed python3-onnx, for graphrun's conformance runner.

  /usr/bin/python3 tests/conformance/generate_data.py OUTPUT_DIR [--stamp FILE]

onnx 1.12's case files use numpy aliases that numpy 1.24 removed (np.float, np.int, np.bool, ...);
the shim below restores them before the cases are imported. A case file that still fails to import
is reported and left out rather than aborting the whole generation. The node tests are written into
OUTPUT_DIR/node/<test name>/ and ONNX's small model tests, built in code like them (sequences, expand, the
training domain's Gradient, ...), into OUTPUT_DIR/simple/<test name>/; not the model-zoo tests, which would need
downloads.
"""
import argparse
import importlib
import os
import pkgutil
import sys
import traceback

import numpy as np


def apply_numpy_shim():
    aliases = {'bool': bool, 'int': int, 'float': float, 'complex': complex, 'object': object,
               'str': str, 'long': int, 'unicode': str}
    for name, value in aliases.items():
        if name not in np.__dict__:
            setattr(np, name, value)


def tolerant_import_recursive(failures):
    """Like onnx's import_recursive, but one broken case module does not stop the others."""
    def import_recursive(package):
        for _, name, ispkg in pkgutil.iter_modules(package.__path__):
            module_name = f'{package.__name__}.{name}'
            try:
                module = importlib.import_module(module_name)
            except Exception as e:  # noqa: BLE001 - report and continue
                failures.append((module_name, f'{type(e).__name__}: {e}'.splitlines()[0]))
                continue
            if ispkg:
                import_recursive(module)
    return import_recursive


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('output')
    ap.add_argument('--stamp', help='file to touch when generation succeeded')
    a = ap.parse_args()

    apply_numpy_shim()
    import onnx.backend.test.case.node as node_cases
    import onnx.backend.test.case.model as model_cases
    from onnx.backend.test import cmd_tools

    failures = []
    node_cases.import_recursive = tolerant_import_recursive(failures)
    collect_models = model_cases.collect_testcases
    # The model-zoo ("real") tests need downloads; the "simple" ones are built in code.
    model_cases.collect_testcases = lambda *args, **kw: [c for c in collect_models(*args, **kw) if c.kind != 'real']
    cmd_tools.generate_data(argparse.Namespace(output=a.output, op_type=None))

    for module, why in failures:
        print(f'generate_data.py: skipped case file {module}: {why}', file=sys.stderr)
    count = len(os.listdir(os.path.join(a.output, 'node')))
    print(f'generate_data.py: {count} node tests in {os.path.join(a.output, "node")}')
    simple = os.path.join(a.output, 'simple')
    if os.path.isdir(simple):
        print(f'generate_data.py: {len(os.listdir(simple))} model tests in {simple}')
    if count == 0:
        sys.exit('generate_data.py: no node tests were generated')
    if a.stamp:
        with open(a.stamp, 'w') as f:
            f.write(f'{count} node tests\n')


if __name__ == '__main__':
    main()
