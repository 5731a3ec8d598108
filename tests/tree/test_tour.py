#!/usr/bin/env python3
"""The tour (scripts/tour.py): a small ladder over the built chapter programs, on the tiny model.

The tour is the first command a reader runs: these tests run it on the programs in KVHEAP_BIN_DIR
(as ctest sets it) with a few requests, check the table it writes, that its check of the greedy
ids fails when one chapter's ids are changed, and that it never overwrites the results another
machine wrote into the same file name but writes its own beside them.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOUR = os.path.join(ROOT, "scripts", "tour.py")
CHAPTERS = ["01_cpu_reference", "02_contiguous_gpu", "03_paged_blocks", "04_cow_prefix_sharing",
            "05_batched_scheduler"]


def run_tour(*flags):
    """Runs the ladder on the tiny model (12 requests, no bandwidth probe, no plots), on the
    device KVHEAP_TOUR_DEVICE names (cpu by default; cuda runs chapters 2-5 on the simulator in
    a simulator build)."""
    bin_dir = os.environ.get("KVHEAP_BIN_DIR", os.path.join(ROOT, "build", "cpu", "bin"))
    cmd = [sys.executable, TOUR, "--bin", bin_dir, "--model", "tiny", "--requests", "12",
           "--no-peak", "--no-plots", "--device", os.environ.get("KVHEAP_TOUR_DEVICE", "cpu"),
           *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def ladder_rows(text):
    """The ladder table's rows: the first table's lines that start with '| 0'."""
    rows = []
    for line in text.splitlines():
        if re.match(r"\| 0\d_", line):
            rows.append(line)
        elif rows:
            break
    return rows


def number(cell):
    return float(cell.split()[0])


class Tour(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def test_small_ladder_has_a_row_per_chapter_with_ratios(self):
        out = os.path.join(self.dir.name, "ladder.md")
        done = run_tour("--out", out)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(out) as f:
            written = f.read()
        self.assertEqual(written.strip(), done.stdout.strip(), "the file holds the printed table")
        rows = ladder_rows(written)
        self.assertEqual([r.split("|")[1].strip() for r in rows], CHAPTERS)
        cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
        for i, row in enumerate(cells):
            self.assertEqual(len(row), 9, rows[i])
            self.assertGreaterEqual(number(row[2]), 1, rows[i])  # requests at once
            self.assertGreater(number(row[7]), 0, rows[i])  # tokens/s
            if i > 0:  # the ratio to the row above, as printed
                self.assertRegex(row[2], r"\(\d+\.\d\dx\)$")
                want = number(row[2]) / number(cells[i - 1][2])
                self.assertAlmostEqual(float(row[2].split("(")[1].rstrip("x)")), want, places=2)
        # The allocator's ladder, which the tiny model shows as well as a large one: paging holds
        # more requests at once than reservation, and sharing computes fewer prompt rows.
        self.assertGreater(number(cells[2][2]), number(cells[0][2]))
        self.assertLess(number(cells[3][5]), number(cells[2][5]))
        self.assertRegex(written, r"(?m)^machine: .+, \d+ logical CPUs")
        self.assertIn("Poisson arrivals at", written)

    def test_a_changed_id_fails_the_ladder(self):
        done = run_tour("--out", os.path.join(self.dir.name, "x.md"), "--plant-difference", "03")
        self.assertNotEqual(done.returncode, 0, done.stdout)
        self.assertIn("chapters disagree on greedy ids", done.stderr)
        self.assertRegex(done.stderr, r"ch03_paged_blocks: request 0 token 0 is \d+ where chapter 1 "
                                      r"gives \d+")
        self.assertFalse(os.path.exists(os.path.join(self.dir.name, "x.md")))

    def test_keeps_a_file_another_machine_wrote(self):
        first = run_tour("--results", self.dir.name)
        self.assertEqual(first.returncode, 0, first.stderr)
        (name,) = os.listdir(self.dir.name)
        path = os.path.join(self.dir.name, name)
        self.assertRegex(name, r"^ladder-[a-z0-9-]+\.md$")

        with open(path) as f:
            theirs = re.sub(r"(?m)^machine: .*$", "machine: another one", f.read())
        with open(path, "w") as f:
            f.write(theirs)
        moved = run_tour("--results", self.dir.name)  # this machine's go to a name of its own
        self.assertEqual(moved.returncode, 0, moved.stderr)
        self.assertIn("another machine", moved.stderr)
        self.assertEqual(len(os.listdir(self.dir.name)), 2, os.listdir(self.dir.name))
        with open(path) as f:
            self.assertEqual(f.read(), theirs, "another machine's results were overwritten")
        (mine,) = set(os.listdir(self.dir.name)) - {name}
        self.assertTrue(mine.startswith(name[:-3] + "-"), mine)
        with open(os.path.join(self.dir.name, mine)) as f:
            self.assertEqual(len(ladder_rows(f.read())), 5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
