"""C++/CUDA source as the house tests read it: the tokens of its code, comments left out.

tokens(text) yields (kind, text, line) for every identifier ("id"), string literal ("str", the
literal's contents) and single punctuation character ("punct") outside comments. Character
literals and numbers are skipped; preprocessor lines are tokenised like code, so that an
#include's path counts as a string. It is a lexer, not a parser: enough to tell code from
comments, which a grep cannot.
"""
import os
import re
import subprocess

SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[0-9](?:[0-9A-Za-z_.']|[eEpP][+-])*")
_RAW = re.compile(r'R"([^(\s\\]{0,16})\(')


def tokens(text):
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r\f\v\\":
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
        elif c == "R" and _RAW.match(text, i):
            delim = _RAW.match(text, i).group(1)
            start = i + 3 + len(delim)
            end = text.find(")" + delim + '"', start)
            end = n if end < 0 else end
            yield ("str", text[start:end], line)
            line += text.count("\n", i, end)
            i = end + len(delim) + 2
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if c == '"':
                yield ("str", text[i + 1:j], line)
            i = j + 1
        elif c.isdigit():
            i = _NUMBER.match(text, i).end()
        elif c.isalpha() or c == "_":
            m = _IDENT.match(text, i)
            word = m.group()
            # An encoding prefix (u8"...", L"...") belongs to the literal that follows.
            if m.end() < n and text[m.end()] == '"' and word in ("u8", "u", "U", "L"):
                i = m.end()
                continue
            yield ("id", word, line)
            i = m.end()
        else:
            yield ("punct", c, line)
            i += 1


def words(token):
    """The lowercase words of an identifier or a string: split at '_', at every other
    non-alphanumeric character and at case changes (ShmBackend -> shm, backend; kShm -> k, shm;
    NCCLComm -> nccl, comm)."""
    out = []
    for part in re.split(r"[^A-Za-z0-9]+", token):
        out += [w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", part)]
    return out


def tracked_files(root, folders, suffixes=SOURCE_SUFFIXES):
    """Paths (relative to root) of the files under `folders` with one of `suffixes` that git
    tracks or would track (new files not yet added count; ignored ones, a build folder, not)."""
    listed = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                             "--exclude-standard", "--"] + list(folders),
                            capture_output=True, text=True, check=True).stdout.split("\n")
    return sorted({p for p in listed if p.endswith(suffixes) and
                   os.path.isfile(os.path.join(root, p))})


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()
