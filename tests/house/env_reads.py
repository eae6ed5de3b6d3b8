#!/usr/bin/env python3
"""The house test of issue 26: the environment's KOLO_* variables are read once, through the
knob registry, where a program starts.

kolo::init() parses every KOLO_* variable once (KnobSet::from_process_env, common/knobs.h) and
hands the parsed KnobSet down: the backends read their options from BackendContext::knobs, the
coordinator from RuntimeConfig, the launcher's world from launched_world(knobs). A second read
of the environment can disagree with the first (a variable changed since, a value the first
read rejected) and repeats the parse. So, in every tracked C++/CUDA source outside common/
(which implements the registry) and outside test code:

  - no getenv() (std::getenv, ::getenv, secure_getenv) of a "KOLO_..." string literal: ask
    the KnobSet instead;
  - no call of KnobSet::from_process_env() or kolo_environment() except at the entry points
    listed in ENTRY_POINTS, each the one place where its program reads the environment.

Test code (unit tests, tests/, testing/) is out of scope: a test of the launcher must look at
the environment the launcher gave it. Fails naming file:line and what to do.

Usage: env_reads.py [ROOT]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpp_source  # noqa: E402

TEST_CODE = re.compile(r"_test\.|(^|/)(tests|testing)/")
GETENV = {"getenv", "secure_getenv"}
READERS = {"from_process_env", "kolo_environment"}

# (file, function) -> why this is where its program reads the environment, once.
ENTRY_POINTS = {
    ("coordinator/api.cc", "from_process_env"):
        "kolo::init(): the library's one parse, handed down to everything it builds",
    ("tools/kolorun/options.cc", "kolo_environment"):
        "kolorun validates the knobs its ranks will get (its own environment plus -x) before "
        "starting any",
    ("bench/kolo_bench.cc", "from_process_env"):
        "kolo-bench's main(): one parse, handed to every command",
}


def call_arguments(toks, i):
    """The tokens between the '(' at toks[i] and its matching ')'."""
    depth, j = 0, i
    while j < len(toks):
        if toks[j][0] == "punct" and toks[j][1] == "(":
            depth += 1
        elif toks[j][0] == "punct" and toks[j][1] == ")":
            depth -= 1
            if depth == 0:
                return toks[i + 1:j]
        j += 1
    return toks[i + 1:]


def violations(root, rel):
    toks = list(cpp_source.tokens(cpp_source.read(root, rel)))
    out = []
    for i, (kind, text, line) in enumerate(toks):
        if kind != "id" or i + 1 >= len(toks) or toks[i + 1][1] != "(":
            continue
        if text in GETENV:
            names = [t for k, t, _ in call_arguments(toks, i + 1) if k == "str"]
            for name in names:
                if name.startswith("KOLO_"):
                    out.append((line, f'getenv("{name}") reads a Kolo knob from the environment: '
                                      f"read it from the KnobSet that kolo::init() (or your "
                                      f"program's main()) parsed once"))
        elif text in READERS and (rel, text) not in ENTRY_POINTS:
            out.append((line, f"{text}() reads the environment again: take the KnobSet that "
                              f"kolo::init() parsed (BackendContext::knobs, launched_world(knobs), "
                              f"a parameter), or list this program's one entry point in "
                              f"ENTRY_POINTS of tests/house/env_reads.py with its reason"))
    return out


def main(argv):
    root = argv[0] if argv else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    found = []
    for rel in cpp_source.tracked_files(root, ["."]):
        if rel.startswith("common/") or TEST_CODE.search(rel):
            continue
        for line, what in violations(root, rel):
            found.append(f"{rel}:{line}: {what}")
    for f in found:
        print(f)
    if found:
        print(f"FAILED: {len(found)} read(s) of KOLO_* variables outside the registry (above)")
        return 1
    print("ok: KOLO_* variables are read once, by the registry, at each program's entry point")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
