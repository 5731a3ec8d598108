#!/usr/bin/env python3
"""clang-tidy over the project's sources, skipping the files it already found clean as they are.

  scripts/tidy_cached.py --build build/lint REGEX     (scripts/lint.sh runs it)

REGEX selects the files of BUILD/compile_commands.json to check, as run-clang-tidy's file
arguments do. clang-scan-deps lists every file each source includes, in a second or two; a source
whose key is recorded as clean is skipped, and run-clang-tidy checks the rest. The key is a hash of
the clang-tidy version, .clang-tidy, the arguments below, what -march=native means on this CPU,
the source's compile command (with this clone's folder taken out) and the content of the source
and of every file it includes, system headers too: a finding can only change when one of those
does. Only a run with no finding records its files as clean (in ~/.cache/kvheap/clang-tidy, or
under $XDG_CACHE_HOME), so a finding is reported every time until it is fixed. --no-cache checks
every file.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvheap",
                     "clang-tidy")
EXTRA_ARG = "-extra-arg=-Wno-unknown-warning-option"


def tool(*names):
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    sys.exit(f"tidy_cached: none of {', '.join(names)} is installed "
             "(scripts/install-deps.sh installs clang-tidy and clang-tools)")


def source_of(entry):
    """The entry's source file, named as run-clang-tidy names it (absolute, as given)."""
    f = entry["file"]
    return f if os.path.isabs(f) else os.path.normpath(os.path.join(entry["directory"], f))


def dependencies(scan_deps, entries, jobs):
    """{source: [every file it reads]} from clang-scan-deps; a source it cannot scan is left out
    (clang-tidy then checks it, and reports what is wrong)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "compile_commands.json")
        with open(db, "w") as f:
            json.dump(entries, f)
        p = subprocess.run([scan_deps, "-compilation-database", db, "-j", str(jobs), "-format",
                            "make"], capture_output=True, text=True)
    deps = {}
    text = p.stdout.replace("\\\n", " ")
    for line in text.splitlines():
        target, sep, rest = line.partition(": ")
        if not sep:
            continue
        files = rest.split()
        if files:
            deps[files[0]] = files
    return deps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="a configured build with compile_commands.json")
    ap.add_argument("--no-cache", action="store_true", help="check every file, record nothing")
    ap.add_argument("regex", help="the files to check, as a regular expression on their paths")
    args = ap.parse_args()

    tidy = tool("clang-tidy")
    runner = tool("run-clang-tidy")
    scan_deps = tool("clang-scan-deps", "clang-scan-deps-14")
    jobs = os.cpu_count() or 2
    build = os.path.abspath(args.build)
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f) if re.match(args.regex, e["file"])]
    if not entries:
        sys.exit(f"tidy_cached: no file of {build}/compile_commands.json matches {args.regex}")

    version = subprocess.run([tidy, "--version"], capture_output=True, text=True).stdout
    with open(os.path.join(ROOT, ".clang-tidy"), "rb") as f:
        config = f.read()
    # The compile commands say -march=native, which clang reads as this CPU's features (and the
    # sources branch on them); what it expands to is part of every key. Run from /, since clang's
    # expansion names the folder it runs in.
    native = subprocess.run([tool("clang++"), "-march=native", "-###", "-E", "-x", "c++",
                             "/dev/null"], capture_output=True, text=True, cwd="/").stderr
    common = hashlib.sha256(
        "\0".join([version, config.decode(), EXTRA_ARG, native]).encode()).hexdigest()
    digests = {}

    def digest(path):
        if path not in digests:
            with open(path, "rb") as f:
                digests[path] = hashlib.sha256(f.read()).hexdigest()
        return digests[path]

    def local(text):  # this clone's folders out of a path or a command
        return text.replace(build, "<build>").replace(ROOT, "<root>")

    deps = {} if args.no_cache else dependencies(scan_deps, entries, jobs)
    keys, unchecked = {}, []
    for e in entries:
        source = source_of(e)
        if source not in deps:
            unchecked.append(source)
            continue
        h = hashlib.sha256((common + local(e.get("command") or " ".join(e["arguments"]))).encode())
        for dep in deps[source]:
            h.update(f"\0{local(dep)}\0{digest(dep)}".encode())
        keys[source] = h.hexdigest()
        if not os.path.isfile(os.path.join(CACHE, keys[source])):
            unchecked.append(source)

    print(f"clang-tidy: {len(entries)} files, {len(entries) - len(unchecked)} of them unchanged since a "
          f"clean check", flush=True)
    if unchecked:
        pattern = "^(" + "|".join(re.escape(f) for f in sorted(unchecked)) + ")$"
        p = subprocess.run([runner, "-clang-tidy-binary", tidy, "-p", build, "-quiet", "-j",
                            str(jobs), EXTRA_ARG, pattern])
        if p.returncode != 0:
            return p.returncode
    if not args.no_cache:
        os.makedirs(CACHE, exist_ok=True)
        for source in unchecked:
            if source in keys:
                open(os.path.join(CACHE, keys[source]), "w").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
