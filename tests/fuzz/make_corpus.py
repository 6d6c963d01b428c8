#!/usr/bin/env python3
# Seed corpus for the fuzz targets, written at configure time: every hex
# request under the given directories (the captured client requests in
# tests/unit/fixtures and the per-version requests in tests/fuzz/seeds)
# becomes one binary file in the output directory, named after its source;
# binary files (the reproducers in tests/fuzz/crashes) are copied as they
# are, so every past finding is replayed first. Also creates the
# crash-artifact directory. Usage:
#   make_corpus.py OUT_DIR CRASH_DIR HEX_DIR...
import os
import sys


def main():
    out, crashes, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    os.makedirs(crashes, exist_ok=True)
    for src in sources:
        if not os.path.isdir(src):
            continue
        for name in sorted(os.listdir(src)):
            path = os.path.join(src, name)
            if name.startswith('README') or not os.path.isfile(path):
                continue
            if name.endswith('.hex'):
                with open(path) as f:
                    data = bytes.fromhex(f.read().strip())
                name = name[:-4]
            else:
                with open(path, 'rb') as f:
                    data = f.read()
            dst = os.path.join(out, os.path.basename(src) + '-' + name)
            with open(dst, 'wb') as f:
                f.write(data)


if __name__ == '__main__':
    main()
