#!/usr/bin/env python3
"""Registers, spills, shared memory and theoretical occupancy of every kernel in kernels/, for
sm_80 and sm_90, as ptxas reports them; and the check that none of them spills or grows past its
register budget.

  scripts/kernel_resources.py --build build/cuda-check            check (scripts/test.sh, step 3)
  scripts/kernel_resources.py --build build/cuda-check --update   rewrite the committed table
  scripts/kernel_resources.py --build build/cuda-check --only paged_attention.cu   one file

The build folder is any configured real CUDA build (preset cuda): its compile_commands.json gives
each .cu file's flags. Each file is compiled again for device code only (nvcc --fatbin, no host
compile), for both architectures at once, with -O3 -DNDEBUG as the Release build has them and
-Xptxas -v. The table is docs/results/kernel-resources.md; its budget column is the committed
budget the check holds the registers to.

ptxas's report for a file is kept in a cache (~/.cache/kvheap/kernel-resources, or under
$XDG_CACHE_HOME), keyed by nvcc's version, the device command (with the source and build folders
taken out) and the content of every file in kernels/, device/ and base/, the folders a kernel may
include from: a tree whose kernels did not change is checked in a second instead of minutes.
--no-cache compiles every file.

The check fails when a kernel spills (every kernel in kernels/ runs on the decode path), when a
cache-streaming kernel (decode attention, the prefix product) keeps any local memory (a stack
frame: an array indexed at run time), when a kernel's registers exceed its committed budget, or
when the committed table does not list exactly the kernels the sources define. A kernel's budget is the most registers it may use
without losing a block per SM, so growth that costs occupancy fails and growth that does not only
leaves the table out of date, which the check reports.

It also fails when a cache-streaming kernel keeps less than 48 KiB of K and V in flight per SM
(pipeline stages being loaded x stage bytes x resident blocks). By Little's law an SM must have
bandwidth x latency bytes outstanding: an H200's 4.8 TB/s over 132 SMs is 36 GB/s an SM, and at
an assumed 0.7-0.9 us a load takes under full load (not measured here) that is 26-33 KB; 48 KiB
leaves half as much again.
"""
import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "docs", "results", "kernel-resources.md")
ARCHS = ["sm_80", "sm_90"]

# Per-SM limits of the two architectures, as the CUDA occupancy calculator (cuda_occupancy.h)
# has them: shared memory per SM (the default carve-out gives a block all of it), and the same
# register file, thread, block and allocation limits on both.
SMEM_PER_SM = {"sm_80": 167936, "sm_90": 233472}
REGS_PER_SM = 65536
SUB_PARTITIONS = 4
REG_UNIT = 256  # registers are allocated per warp in units of 256
MAX_REGS = 255
MAX_WARPS = 64
MAX_BLOCKS = 32
SMEM_RESERVED = 1024  # per block, by the driver (sm_80 and later)
SMEM_UNIT = 128

# Decode attention (kernels/decode_attention_launch.cuh, AttentionLaunch::run): kThreads threads,
# and attention_smem_bytes(paged) of dynamic shared memory: kStages tiles of kStageBytes, a ring of
# kStages x kMaxTile row offsets (8 bytes each), and a paged layout's window of kWindowPages page
# ids. The constants are read from kernels/decode_attention.cuh itself.
ATTENTION_HEADER = os.path.join(ROOT, "kernels", "decode_attention.cuh")
MIN_BYTES_IN_FLIGHT = 48 * 1024  # per SM: what Little's law asks of an H200 (see the check)


# The prefix pass as a tensor-core product (kernels/prefix_product.cuh): kProductWarps x 32
# threads at most, and kProductStages tiles of kProductTile K and V rows of head_dim + 8 16-bit
# elements; kProductStages - 1 tiles load while one is computed.
PRODUCT_HEADER = os.path.join(ROOT, "kernels", "prefix_product.cuh")


def header_constants(path, names):
    """{name: value} of a header's `constexpr int kName = <integer expression>;` lines, which
    must include every one of `names`."""
    out = {}
    with open(path) as f:
        for m in re.finditer(r"constexpr int (k\w+) = ([0-9 *+]+);", f.read()):
            out[m.group(1)] = eval(m.group(2), {"__builtins__": {}})  # digits, * and + only
    for name in names:
        if name not in out:
            sys.exit(f"kernel_resources: no `constexpr int {name} = ...;` in {path}")
    return out


ATTENTION = header_constants(ATTENTION_HEADER,
                             ("kWarps", "kStages", "kStageBytes", "kWindowPages", "kMaxTile"))
PRODUCT = header_constants(PRODUCT_HEADER, ("kProductTile", "kProductStages", "kProductWarps"))


def streams_cache(name):
    """True for the kernels that stream the KV cache: decode attention and the prefix product."""
    return name.startswith(("decode_attention_kernel", "prefix_product_kernel"))
ATTENTION_THREADS = ATTENTION["kWarps"] * 32


def attention_smem(paged):
    a = ATTENTION
    return (a["kStages"] * (a["kStageBytes"] + a["kMaxTile"] * 8)
            + (a["kWindowPages"] * 4 if paged else 0))


def bytes_in_flight(k):
    """K and V bytes a cache-streaming kernel keeps loading per SM: the stages - 1 tiles of
    each resident block that are in flight while it computes one. A decode-attention tile fills
    its stage at the instance's largest head_dim; the generic instance (head_dim 0) at a smaller
    one keeps less. A product tile is kProductTile rows of K and V at its head_dim."""
    threads, dyn = launch_config(k["name"])
    blocks = blocks_per_sm(k["arch"], k["regs"], k["smem"], threads, dyn)
    m = re.match(r"prefix_product_kernel<[^,]+, (\d+)>$", k["name"])
    if m:
        tile = PRODUCT["kProductTile"] * 2 * int(m.group(1)) * 2
        return (PRODUCT["kProductStages"] - 1) * tile * blocks
    return (ATTENTION["kStages"] - 1) * ATTENTION["kStageBytes"] * blocks


def launch_config(name):
    """(threads, dynamic shared memory) of the largest launch of a kernel, from its launch site."""
    m = re.match(r"decode_attention_kernel<[^,]+, (-?\d+), (\d+), (.*)>$", name)
    if m:
        return ATTENTION_THREADS, attention_smem("ContiguousLocator" not in m.group(3))
    m = re.match(r"prefix_product_kernel<[^,]+, (\d+)>$", name)
    if m:  # shared_prefix_attention.cu: 16 query rows a warp; product_smem_bytes(head_dim)
        p = PRODUCT
        return (p["kProductWarps"] * 32,
                p["kProductStages"] * 2 * p["kProductTile"] * (int(m.group(1)) + 8) * 2)
    if name in ("greedy_kernel", "draw_kernel"):
        return 512, 0  # sample.cu: row_threads(vocab, kMaxThreads)
    if name == "merge_splits_kernel":
        # decode_attention.cu: up to 1024 threads, and a float per split (at most 1024) and per
        # thread of dynamic shared memory
        return 1024, (1024 + 1024) * 4
    return 256, 0  # the other launchers use at most 256 threads (head_dim rounded up to 32, or 256)


def blocks_per_sm(arch, regs, smem_static, threads, smem_dynamic):
    """Theoretical resident blocks per SM: the least of the warp, block, register and shared
    memory limits, computed as cudaOccMaxActiveBlocksPerMultiprocessor does."""
    warps = -(-threads // 32)
    by_warps = MAX_WARPS // warps
    regs_per_warp = -(-max(regs, 1) * 32 // REG_UNIT) * REG_UNIT
    by_regs = (REGS_PER_SM // SUB_PARTITIONS // regs_per_warp) * SUB_PARTITIONS // warps
    smem = smem_static + smem_dynamic + SMEM_RESERVED
    smem = -(-smem // SMEM_UNIT) * SMEM_UNIT
    by_smem = SMEM_PER_SM[arch] // smem
    return min(MAX_BLOCKS, by_warps, by_regs, by_smem)


def register_budget(arch, k):
    """Most registers that keep the kernel's blocks per SM."""
    threads, dyn = launch_config(k["name"])
    target = blocks_per_sm(arch, k["regs"], k["smem"], threads, dyn)
    budget = k["regs"]
    while budget < MAX_REGS and blocks_per_sm(arch, budget + 1, k["smem"], threads, dyn) >= target:
        budget += 1
    return budget


def device_command(entry, out):
    """The file's build command, turned into a device-only compile for both architectures."""
    args = shlex.split(entry["command"])
    keep = []
    skip_next = False
    for a in args:
        if skip_next:
            skip_next = False
            continue
        if a in ("-o", "-MT", "-MF", "-gencode", "-arch"):
            skip_next = True
            continue
        if a in ("-c", "-MD") or a.startswith(("--generate-code", "-gencode=", "-arch=", "-O")):
            continue
        if a == "-DNDEBUG":
            continue
        keep.append(a)
    gencode = []
    for arch in ARCHS:
        gencode += ["-gencode", f"arch=compute_{arch[3:]},code={arch}"]
    return keep + ["-O3", "-DNDEBUG", "--fatbin"] + gencode + ["-Xptxas", "-v", "-o", out]


def parse_ptxas(text):
    """[{mangled, arch, regs, spill_st, spill_ld, stack, smem}] from ptxas -v output."""
    kernels = []
    current = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
        if m:
            current = {"mangled": m.group(1), "arch": m.group(2), "regs": 0, "spill_st": 0,
                       "spill_ld": 0, "stack": 0, "smem": 0}
            kernels.append(current)
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m:
            current["stack"], current["spill_st"], current["spill_ld"] = map(int, m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            current["smem"] = int(s.group(1)) if s else 0
            current = None
    return kernels


def readable(demangled):
    """'void kvheap::cuda::detail::k<float, 128>(float const*, ...)' -> 'k<float, 128>'."""
    name = demangled[5:] if demangled.startswith("void ") else demangled
    depth = 0
    for i, c in enumerate(name):  # drop the parameter list: the first '(' outside <...>
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and not name.startswith("(anonymous", i):
            name = name[:i]
            break
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"\bkvheap::(cuda::)?(detail::)?", "", name)
    return name


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return [readable(n) for n in out]


CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvheap",
                     "kernel-resources")
INCLUDABLE = ["kernels", "device", "base"]  # the folders a kernel's includes may reach


def tree_digest():
    """One hash of every file in the folders a kernel may include from."""
    h = hashlib.sha256()
    for top in INCLUDABLE:
        for folder, dirs, files in sorted(os.walk(os.path.join(ROOT, top))):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, ROOT).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read() + b"\0")
    return h.hexdigest()


def cache_key(cmd, entry, digest, nvcc):
    """The key of one file's ptxas report: what decides it, with no path of this clone in it."""
    build = os.path.abspath(entry["directory"])
    words = [a.replace(build, "<build>").replace(ROOT, "<root>") for a in cmd[:-2]]  # not -o OUT
    h = hashlib.sha256("\0".join([nvcc, digest] + words).encode())
    return h.hexdigest()


def measure(build, only=None, use_cache=True):
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f)
                   if e["file"].endswith(".cu")
                   and os.path.relpath(e["file"], ROOT).startswith("kernels" + os.sep)
                   and (not only or os.path.basename(e["file"]) in only)]
    if not entries:
        sys.exit(f"kernel_resources: no kernels/*.cu in {build}/compile_commands.json; configure a "
                 "real CUDA build there first (cmake --preset cuda -B " + build + ")")
    tmp = os.path.abspath(os.path.join(build, "kernel-resources"))  # the fatbins nvcc writes
    os.makedirs(tmp, exist_ok=True)

    # The compilers as the commands name them: nvcc, and the host compiler it preprocesses with.
    first = shlex.split(entries[0]["command"])
    host = next((a.split("=", 1)[1] for a in first if a.startswith("-ccbin=")), "c++")
    nvcc = "\n".join(subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
                     for exe in (first[0], host))
    digest = tree_digest()
    cached = []

    def run(entry):
        out = os.path.join(tmp, os.path.basename(entry["file"]) + ".fatbin")
        cmd = device_command(entry, out)
        saved = os.path.join(CACHE, cache_key(cmd, entry, digest, nvcc) + ".txt")
        if use_cache and os.path.isfile(saved):
            with open(saved) as f:
                cached.append(entry["file"])
                return os.path.relpath(entry["file"], ROOT), parse_ptxas(f.read())
        p = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stdout + p.stderr)
            raise SystemExit(f"kernel_resources: compiling {entry['file']} failed")
        if use_cache:  # written whole under a name of its own, then renamed: a reader (another
            # run, in another clone) never sees half a report
            os.makedirs(CACHE, exist_ok=True)
            fd, part = tempfile.mkstemp(dir=CACHE, suffix=".part")
            with os.fdopen(fd, "w") as f:
                f.write(p.stdout + p.stderr)
            os.replace(part, saved)
        return os.path.relpath(entry["file"], ROOT), parse_ptxas(p.stdout + p.stderr)

    start = time.time()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(run, entries))
    kernels = []
    for source, ks in results:
        for k in ks:
            k["source"] = source
            kernels.append(k)
    for k, name in zip(kernels, demangle([k["mangled"] for k in kernels])):
        k["name"] = name
    kernels.sort(key=lambda k: (k["source"], k["name"], k["arch"]))
    print(f"kernel_resources: {len(kernels)} kernel instantiations from {len(entries)} files "
          f"({len(cached)} of them from the cache) in {time.time() - start:.0f} s")
    return kernels


def nvcc_version():
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    return m.group(2) if m else "unknown"


def row(k):
    threads, dyn = launch_config(k["name"])
    blocks = blocks_per_sm(k["arch"], k["regs"], k["smem"], threads, dyn)
    occupancy = 100 * blocks * (-(-threads // 32)) // MAX_WARPS
    flight = f"{bytes_in_flight(k) // 1024} KiB" if streams_cache(k["name"]) else "-"
    return (f"| `{k['name']}` | {k['arch']} | {k['regs']} | {register_budget(k['arch'], k)} | "
            f"{k['spill_st']} / {k['spill_ld']} | {k['stack']} | {k['smem']} | {threads} | {dyn} | "
            f"{blocks} | {occupancy} % | {flight} |")


def write_table(kernels, path):
    lines = [
        "# Kernel resources: registers, spills and occupancy",
        "",
        f"What ptxas (nvcc {nvcc_version()}, `-O3`) reports for every kernel instantiation in "
        "`kernels/`, for sm_80 (A100) and sm_90 (H100, H200), and the theoretical occupancy that "
        "follows at the block size and dynamic shared memory of the kernel's largest launch. "
        "Written by `scripts/kernel_resources.py --build build/cuda-check --update`; step 3 of "
        "`scripts/test.sh` checks the tree against it.",
        "",
        "- **regs**: registers per thread. **budget**: the most registers that keep the kernel's "
        "blocks per SM; the check fails above it.",
        "- **spill st / ld**: bytes of spill stores and loads per thread; the check fails on "
        "any. **stack**: bytes of local memory (a stack frame); the check fails on any in decode "
        "attention and the prefix product (rope's comes from the slow path of sinf/cosf for "
        "large arguments).",
        "- **smem**: static shared memory; **dyn smem**: dynamic shared memory of the largest launch "
        "(attention's generic head_dim counted at its largest: 256, or 128 at G = 16).",
        "- **blocks/SM**, **occupancy**: resident blocks per SM and the share of the SM's 64 warp "
        "slots they fill, from the register file, warp, block and shared memory limits "
        "(as cudaOccupancyMaxActiveBlocksPerMultiprocessor computes them).",
        "- **in flight**: the K and V loads outstanding per SM of decode attention and the prefix "
        "product, (pipeline stages - 1) x bytes of a tile x blocks/SM; the check fails below "
        "48 KiB.",
        "",
        "Decode attention's name reads `decode_attention_kernel<KV type, head_dim (0: any), "
        "heads per block G, row locator>`; the prefix product's `prefix_product_kernel<KV type, "
        "head_dim>`.",
        "",
        "| kernel | arch | regs | budget | spill st / ld | stack | smem | threads | dyn smem | "
        "blocks/SM | occupancy | in flight |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    source = None
    for k in kernels:
        if k["source"] != source:
            source = k["source"]
            lines.append(f"| **{source}** | | | | | | | | | | | |")
        lines.append(row(k))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_budgets(path):
    """{(name, arch): (regs, budget)} from the committed table."""
    budgets = {}
    if not os.path.exists(path):
        return budgets
    with open(path) as f:
        for line in f:
            m = re.match(r"\| `([^`]+)` \| (sm_\d+) \| (\d+) \| (\d+) \|", line)
            if m:
                budgets[(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
    return budgets


def check(kernels, budgets, partial=False):
    failures = []
    stale = 0
    seen = set()
    for k in kernels:
        key = (k["name"], k["arch"])
        seen.add(key)
        where = f"{k['name']} ({k['arch']}, {k['source']})"
        if k["spill_st"] or k["spill_ld"]:
            failures.append(f"{where} spills: {k['spill_st']} B spill stores, "
                            f"{k['spill_ld']} B spill loads per thread")
        elif k["stack"] and streams_cache(k["name"]):
            failures.append(f"{where} keeps {k['stack']} B of local memory (a stack frame): its "
                            "per-lane arrays must all live in registers")
        if streams_cache(k["name"]) and bytes_in_flight(k) < MIN_BYTES_IN_FLIGHT:
            failures.append(f"{where} keeps {bytes_in_flight(k) // 1024} KiB of K and V in flight "
                            f"per SM, below {MIN_BYTES_IN_FLIGHT // 1024} KiB")
        if key not in budgets:
            failures.append(f"{where} is not in the committed table")
            continue
        committed, budget = budgets[key]
        if k["regs"] > budget:
            failures.append(f"{where} uses {k['regs']} registers, past its budget of {budget} "
                            f"(committed: {committed}); it now fits fewer blocks per SM")
        elif k["regs"] != committed:
            stale += 1
    for key in sorted(set(budgets) - seen) if not partial else []:
        failures.append(f"{key[0]} ({key[1]}) is in the committed table but no source defines it")
    return failures, stale


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="a configured real CUDA build folder")
    ap.add_argument("--update", action="store_true", help=f"rewrite {os.path.relpath(TABLE, ROOT)}")
    ap.add_argument("--table", default=TABLE, help="the committed table (default: %(default)s)")
    ap.add_argument("--only", nargs="+", metavar="FILE.cu",
                    help="check only these files of kernels/ (quicker; no --update)")
    ap.add_argument("--no-cache", action="store_true",
                    help="compile every file, and keep no report (see above)")
    args = ap.parse_args()
    if args.only and args.update:
        ap.error("--update rewrites the whole table: leave out --only")

    kernels = measure(args.build, args.only, use_cache=not args.no_cache)
    measured = os.path.join(args.build, "kernel-resources.md")
    write_table(kernels, measured)
    if args.update:
        write_table(kernels, args.table)
        print(f"kernel_resources: wrote {args.table}")
        return 0
    failures, stale = check(kernels, read_budgets(args.table), partial=bool(args.only))
    if failures:
        for f in failures:
            print("kernel_resources: FAIL: " + f, file=sys.stderr)
        print(f"kernel_resources: {len(failures)} problems; the measured table is {measured}. "
              "Fix the kernel, or if the change is meant, rerun with --update and commit "
              f"{os.path.relpath(args.table, ROOT)}", file=sys.stderr)
        return 1
    if stale:
        print(f"kernel_resources: {stale} kernels' registers differ from the committed table but "
              f"stay within budget; rerun with --update to bring {os.path.relpath(args.table, ROOT)} "
              "up to date")
    print(f"kernel_resources: no spills, every kernel within its register budget "
          f"({len(kernels)} instantiations)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
