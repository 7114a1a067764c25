#!/usr/bin/env python3
"""Fetches the 8x8 handwritten digits that examples/torch/train_digits.cpp trains on.

The file is sklearn/datasets/data/digits.csv.gz inside scikit-learn's 1.6.1 wheel: 1,797 rows
of 64 pixel values (0..16) and a label, UCI's "Optical Recognition of Handwritten Digits"
(E. Alpaydin, C. Kaynak; CC BY 4.0) as scikit-learn ships it (BSD-3-Clause). Nothing is
installed: `pip download --no-deps scikit-learn==1.6.1` fetches the wheel (13 MB) into a
temporary directory, the one member is extracted, checked against its SHA-256 and written to
DEST atomically. A DEST that already holds the right bytes is left alone (no download).

  tools/fetch_digits.py DEST [--python PYTHON]

Exit status: 0 when DEST holds the file, 1 otherwise (the reason on stderr).
"""

import argparse
import glob
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

MEMBER = "sklearn/datasets/data/digits.csv.gz"
REQUIREMENT = "scikit-learn==1.6.1"
SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python whose pip downloads the wheel (default: this one)")
    args = parser.parse_args()

    try:
        with open(args.dest, "rb") as f:
            if sha256(f.read()) == SHA256:
                print(f"fetch_digits: {args.dest} is already there")
                return 0
    except FileNotFoundError:
        pass

    with tempfile.TemporaryDirectory(prefix="runhooks-digits-") as tmp:
        cmd = [args.python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", tmp, REQUIREMENT]
        print("fetch_digits: " + " ".join(cmd), file=sys.stderr)
        if subprocess.run(cmd, stdin=subprocess.DEVNULL).returncode != 0:
            print(f"fetch_digits: pip download {REQUIREMENT} failed", file=sys.stderr)
            return 1
        wheels = glob.glob(os.path.join(tmp, "scikit_learn-1.6.1-*.whl"))
        if len(wheels) != 1:
            print(f"fetch_digits: expected one scikit-learn wheel, got {wheels}", file=sys.stderr)
            return 1
        with zipfile.ZipFile(wheels[0]) as wheel:
            data = wheel.read(MEMBER)
    if sha256(data) != SHA256:
        print(f"fetch_digits: {MEMBER} has SHA-256 {sha256(data)}, expected {SHA256}",
              file=sys.stderr)
        return 1

    os.makedirs(os.path.dirname(os.path.abspath(args.dest)), exist_ok=True)
    partial = args.dest + ".partial"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, args.dest)
    print(f"fetch_digits: wrote {args.dest} ({len(data)} bytes, from {REQUIREMENT})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
