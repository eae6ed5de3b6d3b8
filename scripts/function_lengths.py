#!/usr/bin/env python3
"""Lists C++/CUDA functions longer than a limit (scripts/run-checks.sh functions).

Usage: scripts/function_lengths.py [--limit N] [--all] [PATH...]
  PATH: files or folders (default: the repository's tracked *.cc, *.h, *.cu, *.cuh)
  --limit N  report functions over N lines (default 80, the house rule)
  --all      include tests (*_test.*, tests/, testing/); by default they are left out
Prints "LINES<TAB>FILE:LINE<TAB>NAME" per function over the limit, longest first, and exits 1
when there is any.

How a function is found: comments, string and character literals and preprocessor lines are
blanked (newlines kept); then braces are walked. A '{' at namespace or class scope whose header
(the text since the previous ';', '{' or '}' at that scope) contains ')' opens a function body,
unless the header ends like a constructor's member initialiser (the '{' of `x_{...}`). The
length runs from the header's first line to the closing brace, blank and comment lines
included; lambdas and nested blocks count toward the function that holds them.
"""
import argparse
import os
import re
import subprocess
import sys

SUFFIXES = (".cc", ".h", ".cu", ".cuh")
TEST_PATH = re.compile(r"(_test\.|(^|/)tests/|(^|/)testing/)")


def blank(src):
    """src with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(src)
    line_start = True
    while i < n:
        c = src[i]
        if line_start and c == "#":
            while i < n and src[i] != "\n":
                if src[i] == "\\" and i + 1 < n and src[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        if src.startswith("//", i):
            while i < n and src[i] != "\n":
                i += 1
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
            continue
        raw = re.match(r'R"([^(\s]*)\(', src[i:i + 20]) if c == "R" else None
        if raw and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = src.find(")" + raw.group(1) + '"', i)
            end = n if end < 0 else end + len(raw.group(1)) + 2
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
            continue
        if c in "\"'":
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and src[i - 1].isalnum() and i + 1 < n and src[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        line_start = c == "\n" or (line_start and c in " \t")
        i += 1
    return "".join(out)


def functions(text):
    """(first line, last line, name) of every function body in blanked `text`."""
    found = []
    scopes = []  # per open brace: "ns" (namespace/class/extern/initialiser) or "fn" or "block"
    header_start = 0
    fn_depth = None  # index in scopes of the function being walked
    fn_start = fn_name = None
    for m in re.finditer(r"[{};]", text):
        ch, pos = m.group(), m.start()
        if fn_depth is not None:
            if ch == "{":
                scopes.append("block")
            elif ch == "}":
                scopes.pop()
                if len(scopes) == fn_depth:
                    found.append((fn_start, text.count("\n", 0, pos) + 1, fn_name))
                    fn_depth = None
                    header_start = pos + 1
            continue
        if ch == ";":
            header_start = pos + 1
            continue
        if ch == "}":
            if scopes:
                scopes.pop()
            header_start = pos + 1
            continue
        header = text[header_start:pos]
        stripped = header.strip()
        is_initialiser = re.search(r"[:,]\s*\w+\s*$", stripped) and ")" in stripped
        if ")" in stripped and not is_initialiser and not re.match(r"(namespace|extern)\b", stripped):
            name_match = re.findall(r"([~\w:]+|operator\s*\S+)\s*\(", stripped)
            fn_name = name_match[0] if name_match else "?"
            if fn_name in ("if", "for", "while", "switch"):
                fn_name = name_match[0]
            first = header_start + len(header) - len(header.lstrip())
            fn_start = text.count("\n", 0, first) + 1
            fn_depth = len(scopes)
            scopes.append("fn")
        else:
            scopes.append("ns")
            header_start = pos + 1
    return found


def tracked_sources(root):
    listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                            check=True).stdout.split()
    return [os.path.join(root, p) for p in listed if p.endswith(SUFFIXES)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("--all", action="store_true")
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = []
    for path in args.paths or [root]:
        if os.path.isdir(path):
            files += [f for f in tracked_sources(path)]
        else:
            files.append(path)
    rows = []
    for path in files:
        rel = os.path.relpath(path, root)
        if not args.all and TEST_PATH.search(rel):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = blank(f.read())
        for first, last, name in functions(text):
            if last - first + 1 > args.limit:
                rows.append((last - first + 1, f"{rel}:{first}", name))
    for length, where, name in sorted(rows, key=lambda r: (-r[0], r[1])):
        print(f"{length}\t{where}\t{name}")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
