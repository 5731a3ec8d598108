#!/usr/bin/env python3
"""The tour (scripts/tour.py) over the built chapter programs, on the tiny model.

The tour is the first command a reader runs, and nothing else checks it: these tests run it on
the programs in KVHEAP_BIN_DIR (as ctest sets it) and check the table it writes, and that it never
overwrites the results another machine wrote into the same file name but writes its own beside
them.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOUR = os.path.join(ROOT, "scripts", "tour.py")
CHAPTERS = ["01_cpu_reference", "02_contiguous_gpu", "03_paged_blocks", "04_cow_prefix_sharing",
            "05_batched_scheduler"]


def run_tour(*flags):
    """Runs the tour on the tiny model (4 tokens, no bandwidth probe) with extra flags."""
    bin_dir = os.environ.get("KVHEAP_BIN_DIR", os.path.join(ROOT, "build", "cpu", "bin"))
    cmd = [sys.executable, TOUR, "--bin", bin_dir, "--model", "tiny", "--max-new-tokens", "4",
           "--no-peak", *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def table_rows(text):
    """The table's rows, one per chapter run: lines that start with '| 0'."""
    return [line for line in text.splitlines() if re.match(r"\| 0\d_", line)]


class Tour(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def test_writes_one_row_per_chapter_run(self):
        out = os.path.join(self.dir.name, "tour.md")
        done = run_tour("--out", out)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(out) as f:
            written = f.read()
        self.assertEqual(written.strip(), done.stdout.strip(), "the file holds the printed table")
        rows = table_rows(written)
        # Chapter 3 runs three times (one sequence, eight, eight of a long prompt).
        self.assertEqual([r.split("|")[1].strip() for r in rows],
                         [CHAPTERS[0], CHAPTERS[1]] + [CHAPTERS[2]] * 3 + CHAPTERS[3:])
        for row in rows:
            cells = [c.strip() for c in row.strip("|").split("|")]
            self.assertEqual(len(cells), 9, row)
            reserved, used = float(cells[2]), float(cells[3])
            self.assertGreaterEqual(reserved, used, row)
            self.assertGreater(float(cells[5]), 0.0, row)  # decode tokens/s
        self.assertRegex(written, r"(?m)^machine: .+, \d+ logical CPUs")

    def test_keeps_a_file_another_machine_wrote(self):
        first = run_tour("--results", self.dir.name)
        self.assertEqual(first.returncode, 0, first.stderr)
        (name,) = os.listdir(self.dir.name)
        path = os.path.join(self.dir.name, name)
        self.assertRegex(name, r"^tour-[a-z0-9-]+\.md$")

        again = run_tour("--results", self.dir.name)  # the same machine rewrites its own file
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(os.listdir(self.dir.name), [name])

        with open(path) as f:
            theirs = re.sub(r"(?m)^machine: .*$", "machine: another one", f.read())
        with open(path, "w") as f:
            f.write(theirs)
        for _ in range(2):  # this machine's results go to a name of its own, the same each time
            moved = run_tour("--results", self.dir.name)
            self.assertEqual(moved.returncode, 0, moved.stderr)
            self.assertIn("another machine", moved.stderr)
            self.assertEqual(len(os.listdir(self.dir.name)), 2, os.listdir(self.dir.name))
        with open(path) as f:
            self.assertEqual(f.read(), theirs, "another machine's results were overwritten")
        (mine,) = set(os.listdir(self.dir.name)) - {name}
        self.assertTrue(mine.startswith(name[:-3] + "-"), mine)
        with open(os.path.join(self.dir.name, mine)) as f:
            self.assertEqual(len(table_rows(f.read())), 7)

if __name__ == "__main__":
    unittest.main(verbosity=2)
