#!/usr/bin/env python3
"""Clang's thread-safety analysis over the code the checking builds never compile (run-checks tsa).

The asan and tsan builds of scripts/run-checks.sh configure -DKOLO_WITH_CUDA=OFF
-DKOLO_WITH_TORCH=OFF, so their -Wthread-safety never sees the nccl backend, the CUDA branches
of the core and the framework, or the torch plugin. This parses those translation units with
Clang, -fsyntax-only (the analysis runs in Sema; nothing is generated, which is what makes it
cheap), each with its own flags from the compile_commands.json of a tree configured with Clang,
CUDA, NCCL, torch and -DKOLO_THREAD_SAFETY=ON, and fails on any thread-safety diagnostic. Other
warnings are the regular builds' business and are silenced here.

Which files: every C++ source of the tree (not generated) under backends/nccl/ or plugins/torch/,
or whose text reaches CUDA, NCCL or LibTorch (KOLO_HAVE_CUDA branches, <cuda_runtime.h>,
"kolo/torch.h", ...).

LibTorch's headers do not parse under Clang 14 in C++20 against libstdc++ 12 (std::vector of a
type that is still incomplete, c10::IValue, has its constexpr members instantiated eagerly), so
the translation units that see them are parsed as C++17; the analysis does not depend on the
language mode, and Kolo's C++20 syntax parses there as Clang extensions.

Usage: scripts/thread_safety_check.py BUILD_DIR [-j N]
Prints one line per file (seconds, verdict); exits 1 when any file fails, with its diagnostics.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("backends/nccl/", "plugins/torch/")
REACHES_DEVICE_OR_TORCH = re.compile(
    r'KOLO_HAVE_CUDA|#include\s*[<"](cuda|cuda_runtime|nccl|torch/|ATen/|c10/|kolo/torch)')
TORCH_INCLUDE = "torch/csrc/api/include"
ANALYSIS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]


def selected(entries):
    """(relative path, argv, directory) of each translation unit to analyse, by path."""
    units = {}
    for e in entries:
        path = os.path.realpath(e["file"])
        rel = os.path.relpath(path, ROOT)
        if rel.startswith("..") or not rel.endswith(".cc"):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if not rel.startswith(FOLDERS) and not REACHES_DEVICE_OR_TORCH.search(text):
            continue
        argv = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
        units[rel] = (syntax_only(argv, path), e["directory"])
    return sorted((rel, argv, d) for rel, (argv, d) in units.items())


def syntax_only(argv, path):
    """The compile command with its output and source dropped, parsing `path` only."""
    out = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c" and os.path.realpath(a) != path:
            out.append(a)
    if any(TORCH_INCLUDE in a for a in out):
        out = [a for a in out if not a.startswith("-std=")] + ["-std=c++17"]
    return out + ANALYSIS + [path]


def analyse(unit):
    rel, argv, directory = unit
    start = time.monotonic()
    r = subprocess.run(argv, cwd=directory, capture_output=True, text=True)
    return rel, r.returncode, time.monotonic() - start, r.stdout + r.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("-j", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    with open(os.path.join(args.build_dir, "compile_commands.json")) as f:
        units = selected(json.load(f))
    if not units:
        print(f"tsa: no nccl, CUDA or torch sources in {args.build_dir}: configured without them?",
              file=sys.stderr)
        return 1
    failed = []
    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        for rel, rc, seconds, output in pool.map(analyse, units):
            print(f"tsa: {seconds:5.1f}s {'ok' if rc == 0 else 'FAILED'} {rel}", flush=True)
            if rc != 0:
                failed.append((rel, output))
    for rel, output in failed:
        print(f"\n---- {rel}\n{output}", file=sys.stderr)
    if failed:
        print(f"tsa: {len(failed)} of {len(units)} files failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
