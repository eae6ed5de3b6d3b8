#!/usr/bin/env python3
"""The house checks fail where they should: each runs on a made-up tree (a fresh git
repository in a temporary folder) holding what it must flag and what it must not, and the test
compares the lines it prints. A check that found nothing would pass on the real tree too, so
this is what makes env_reads.py and backend_leaks.py able to fail.

Usage: self_test.py [ROOT]   (ROOT is ignored: the trees are made here)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def make_tree(test, files):
    root = tempfile.mkdtemp(prefix="kolo-house-")
    test.addCleanup(shutil.rmtree, root)
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    subprocess.run(["git", "init", "-q", root], check=True)
    return root


def run_check(script, root):
    r = subprocess.run([sys.executable, os.path.join(HERE, script), root], capture_output=True,
                       text=True)
    return r.returncode, r.stdout


class EnvReads(unittest.TestCase):
    def test_flags_knob_reads_outside_the_registry_and_names_file_and_line(self):
        root = make_tree(self, {
            "backends/foo.cc": '// getenv("KOLO_IN_A_COMMENT") is prose\n'
                               'const char* h = "KOLO_NOT_READ";\n'
                               'const char* v = std::getenv("KOLO_FOO");\n'
                               'const char* p = ::getenv("PATH");\n',
            "rendezvous/w.cc": "auto k =\n  KnobSet::from_process_env();\n",
            "bench/other.cc": "auto env = kolo_environment();\n",
            "common/knobs.cc": 'Result<KnobSet> KnobSet::from_process_env() { getenv("KOLO_X"); }\n',
            "coordinator/api.cc": "auto k = KnobSet::from_process_env();\n",
            "tools/kolorun/testing/child.cc": 'auto r = std::getenv("KOLO_RANK");\n',
            "backends/foo_test.cc": 'auto r = std::getenv("KOLO_RANK");\n',
            "examples/x/main.cc": 'if (getenv(\n      "KOLO_TIMELINE")) {}\n',
        })
        code, out = run_check("env_reads.py", root)
        self.assertEqual(code, 1, out)
        flagged = [line.split(": ")[0] for line in out.splitlines() if not line.startswith("FAILED")]
        self.assertEqual(flagged, ["backends/foo.cc:3", "bench/other.cc:1", "examples/x/main.cc:1",
                                   "rendezvous/w.cc:2"])
        self.assertIn('getenv("KOLO_FOO") reads a Kolo knob from the environment', out)
        self.assertIn("from_process_env() reads the environment again", out)

    def test_a_clean_tree_passes(self):
        root = make_tree(self, {"ops/a.cc": "int main() { return 0; }\n",
                          "coordinator/api.cc": "auto k = KnobSet::from_process_env();\n"})
        code, out = run_check("env_reads.py", root)
        self.assertEqual(code, 0, out)


class BackendLeaks(unittest.TestCase):
    FOLDERS = {
        "backends/tcp/CMakeLists.txt": "",
        "backends/shm/CMakeLists.txt": "",
        "backends/hierarchical/CMakeLists.txt": "",
        "backends/registry.cc": "std::vector<BackendEntry> entries = {\n"
                                "    backend_entry_shm(),\n    backend_entry_tcp(),\n};\n",
    }

    def test_flags_names_of_backends_in_code_outside_their_folders(self):
        root = make_tree(self, dict(self.FOLDERS, **{
            "coordinator/a.cc": '// tcp is the default: prose\n'
                                'if (name == "tcp") use(kShm);\n'
                                'TcpStore store;  // the rendezvous store, not the backend\n'
                                'auto b = make_hierarchical_backend();\n',
            "backends/shm/s.cc": '#include "backends/tcp/auth.h"\n',
            "backends/tcp/t.cc": 'auto name = "tcp";\n',
            "rendezvous/client.cc": "using asio::ip::tcp;\ntcp::socket s;\n",
            "backends/hierarchical/h.cc": 'const char* intra = "shm";\n',
            "ops/a_test.cc": 'auto b = "shm";\n',
            "bench/b.cc": 'auto ref = "tcp";\n',
        }))
        code, out = run_check("backend_leaks.py", root)
        self.assertEqual(code, 1, out)
        places = sorted(line.strip().split(": ")[0] + " " + line.split("names ")[1].split(":")[0]
                        for line in out.splitlines() if line.startswith("  "))
        self.assertEqual(places, ["backends/hierarchical/h.cc:1 shm", "backends/shm/s.cc:1 tcp",
                                  "coordinator/a.cc:2 shm", "coordinator/a.cc:2 tcp"])
        self.assertIn("shm: 3 files outside backends/shm/ name it: backends/hierarchical/h.cc "
                      "backends/registry.cc coordinator/a.cc", out)
        self.assertIn("FAILED", out)

    def test_the_registry_lines_are_allowed(self):
        root = make_tree(self, dict(self.FOLDERS, **{"ops/a.cc": "int x;\n"}))
        code, out = run_check("backend_leaks.py", root)
        self.assertEqual(code, 0, out)
        self.assertIn("tcp: 1 files outside backends/tcp/ name it: backends/registry.cc", out)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
