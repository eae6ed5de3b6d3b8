#!/usr/bin/env python3
"""The house test of issue 26: no backend's name leaks out of its folder.

A backend is a folder of backends/ with a CMakeLists.txt (tcp, shm, mpi, nccl, ...): what it
is, the rest of Kolo learns from its registry entry (backends/registry.h), its knob rows (the
folder's <name>_knobs.cc) and the build's list of backends. So no library or tool source
outside backends/<name>/ should name <name> in its code: an identifier (kShm, ShmBackend,
nccl_comm), a string literal ("nccl", "backends/tcp/auth.h") or a KOLO_<NAME>_* variable.
Comments are left out: prose may say what the default is. Python (plugins/torch/python) is not
scanned: it names no backend but in Horovod's API (mpi_threads_supported).

For each backend this lists every such place and fails on any that the ALLOWED table below
does not excuse, naming file:line, the backend and the line. The scope is the library and the
tools (SCOPE); unit tests, test support, bench/ (which compares with raw NCCL and MPI on
purpose), docs, examples, scripts and CMake are out of it.

backends/hierarchical/ is not checked as a backend (COMPOSITES): it is no registry entry but
the coordinator's own composite data plane over the registry's backends, built by init() and
switched by the core knobs KOLO_HIERARCHICAL_* and the autotuner, so the coordinator names it
by design. Its folder is scanned like any other for the names of the real backends.

Usage: backend_leaks.py [--list] [ROOT]   (--list: print every place found, excused or not)
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpp_source  # noqa: E402

SCOPE = ["common", "ops", "rendezvous", "timeline", "backends", "coordinator", "elastic", "include",
         "framework", "tools", "plugins"]
SUFFIXES = cpp_source.SOURCE_SUFFIXES
# Unit tests and test support (a test may name every backend to test the registry).
NOT_LIBRARY = re.compile(r"_test\.|(^|/)(tests|testing|bench)/|_bench\.|(^|/)test_[^/]*\.h$")

COMPOSITES = {
    "hierarchical": "the coordinator's composite over registry backends (KOLO_HIERARCHICAL_*, "
                    "the autotuner's categorical knob), not a registry entry",
}

# Words that contain a backend's name but mean something else: (backend, following word).
NOT_THE_BACKEND = {
    ("tcp", "store"),  # rendezvous/'s TcpStore, the key-value store every backend bootstraps
}
# Boost.Asio's protocol is also spelled `tcp` (asio::ip::tcp, tcp::socket): see uses_asio_tcp.

# (file, backend or None for any, regex on the source line, reason). Each entry excuses the
# lines of `file` that match; keep them few, precise, and each with the reason why the name
# cannot move.
ALLOWED = [
    ("plugins/torch/python/bindings.cc", "mpi", r'm\.def\("mpi_threads_supported"',
     "Horovod's Python API has hvd.mpi_threads_supported(); kolo.torch keeps its name so that "
     "Horovod scripts and tests run unchanged (docs/torch.md)"),
    ("plugins/torch/python/bindings.cc", "nccl", r'NCCL_VERSION_CODE',
     "hvd.nccl_built() returns NCCL's version code in Horovod (its tests compare it): the "
     "version of the NCCL headers the plugin was built with, under Horovod's name"),
    ("backends/registry.cc", None, r"^\s*backend_entry_\w+\(\),",
     "the registry's table: one line per backend folder, the one place that lists them"),
    ("common/knob_table.cc", None, r'^\s*(\.(help|default_doc) = )?"',
     "help and documented defaults of core knobs (kolorun --help, the README's table) tell "
     "people which backend a job gets and what a backend does with a core knob; text only, "
     "no code decides by it"),
    ("include/kolo/kolo.h", None, r"\bk(Tcp|Shm|Mpi|Nccl)\b|\[\[deprecated\(",
     "the deprecated BackendKind enum and its queries, kept for one release (removed in 0.4) as "
     "aliases of kolo::built(name); their deprecation messages name the replacement call"),
    ("common/auth.cc", "tcp", r'"kolo-tcp (acceptor|connector|session)"',
     "the handshake's domain-separation labels: part of the wire format that tcp and shm share "
     "(docs/security.md), kept when the code moved out of backends/tcp/ so the bytes on the wire "
     "did not change"),
    ("coordinator/build_queries.cc", None,
     r'BackendKind::k(Tcp|Shm|Mpi|Nccl)|"(tcp|shm|mpi|nccl)"',
     "the deprecated BackendKind's mapping to names, kept one release (as kolo.h)"),
    ("include/kolo/kolo.h", "mpi", r"\bmpi_threads_supported\(\)",
     "Horovod's public name (hvd.mpi_threads_supported()), kept for scripts ported from it"),
    ("backends/mpi/mpi_backend.cc", "tcp", r"use the tcp backend under",
     "an error that tells an mpi user without mpirun which backend to choose instead"),
    ("backends/shm/shm_segment.cc", None, r"use tcp or mpi across hosts",
     "an error that tells a shm user on several hosts which backends span hosts"),
]


def backends(root):
    folders = set()
    for rel in cpp_source.tracked_files(root, ["backends"], ("CMakeLists.txt",)):
        parts = rel.split("/")
        if len(parts) == 3:
            folders.add(parts[1])
    return sorted(folders - set(COMPOSITES))


def uses_asio_tcp(toks):
    """Whether the file names Boost.Asio's TCP protocol, asio::ip::tcp: its bare `tcp` then
    means the protocol (tcp::socket), not the backend."""
    texts = [t for _, t, _ in toks]
    return any(texts[i:i + 4] == ["ip", ":", ":", "tcp"] for i in range(len(texts) - 3))


def places(root, rel, names):
    """(line, backend) for every token of `rel`'s code that names one of `names`."""
    found = set()
    toks = list(cpp_source.tokens(cpp_source.read(root, rel)))
    asio_tcp = uses_asio_tcp(toks)
    for kind, text, line in toks:
        if kind == "punct" or (asio_tcp and kind == "id" and text == "tcp"):
            continue
        ws = cpp_source.words(text)
        for i, w in enumerate(ws):
            if w in names and (w, ws[i + 1] if i + 1 < len(ws) else "") not in NOT_THE_BACKEND:
                found.add((line, w))
    return sorted(found)


def excused(rel, backend, source_line):
    for file, only, pattern, _ in ALLOWED:
        if file == rel and (only is None or only == backend) and re.search(pattern, source_line):
            return True
    return False


def main(argv):
    list_all = "--list" in argv
    args = [a for a in argv if a != "--list"]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    names = backends(root)
    leaks = {n: [] for n in names}
    files_naming = {n: set() for n in names}
    for rel in cpp_source.tracked_files(root, SCOPE, SUFFIXES):
        if NOT_LIBRARY.search(rel):
            continue
        lines = cpp_source.read(root, rel).split("\n")
        for line, backend in places(root, rel, names):
            if rel.startswith(f"backends/{backend}/"):
                continue
            files_naming[backend].add(rel)
            text = lines[line - 1].strip()
            ok = excused(rel, backend, text)
            if list_all or not ok:
                leaks[backend].append((rel, line, text, ok))
    failed = False
    for backend in names:
        print(f"{backend}: {len(files_naming[backend])} files outside backends/{backend}/ "
              f"name it: {' '.join(sorted(files_naming[backend])) or '-'}")
        for rel, line, text, ok in leaks[backend]:
            failed |= not ok
            print(f"  {rel}:{line}: {'(allowed) ' if ok else ''}names {backend}: {text}")
    if failed:
        print("FAILED: a backend's name in code outside its folder (above). Ask the registry "
              "(backends/registry.h: a BackendEntry property) or the backend's knob rows "
              "instead, or add an entry with its reason to ALLOWED in "
              "tests/house/backend_leaks.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
