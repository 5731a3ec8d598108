#!/usr/bin/env python3
"""The machine code of decode attention's tile loop streams K and V at the rate a GPU's copy
peak needs, and paged attention's loop costs what the contiguous one does.

  tests/kernels/check_attention_loop.py contiguous OBJECTS...
      (ctest: KernelCode.DecodeLoopKeepsUpWithTheCopyPeak)
  tests/kernels/check_attention_loop.py paged OBJECTS...
      (ctest: KernelCode.PagedLoopCostsWhatContiguousDoes)

OBJECTS are the real build's kvheap_kernels_cuda objects; the check disassembles (cuobjdump -sass)
the sm_90 code (else the first architecture's) of decode_attention.cu.o and, for `paged`, of
paged_attention.cu.o too. It looks at every decode_attention_kernel specialised for a head_dim (64,
128) and takes as its tile loops the innermost backward branches whose spans hold asynchronous
copies (LDGSTS): one for the contiguous layout; two for the paged one, for a block size that is a
power of two and one that is not, of which the shorter (the power of two's) is the one measured.

Every warp instruction LDGSTS.128 moves 512 B (16 B a lane), so a loop's instructions per 512 B of
K and V is its length over its copies. The length is static: it counts the softmax rescale, which
runs only when a maximum grows, so the instructions a warp executes per tile are fewer.

  every kernel: the loop's K/V copies are all 128-bit LDGSTS; no global load (LDG/LD) at all in
                the loop (a contiguous row's base and a paged row's page ids are read before it);
                no local memory (LDL/STL: spills).
  G <= 4:       at most 111 instructions per 512 B. An SM issues 4 warp instructions a clock; an
                H200 streams 4.8 TB/s over 132 SMs at 1.98 GHz, 18.4 B a clock an SM, 512 B every
                27.9 clocks, which leave room for 111 instructions. (At G = 8 and 16 the group's
                multiply-adds alone, 32 G per 512 B of bf16, pass that: those kernels are
                compute-bound on CUDA cores.)
                At most 12 shuffles per 512 B: an SM's shuffle unit completes one warp shuffle a
                clock, so 12 keep it under half busy at the copy peak.
  paged:        the power-of-two loop's instructions per 512 B within 1.05 times the contiguous
                loop's, kernel by kernel.

cuobjdump and the nvdisasm it runs come with the CUDA toolkit, or from PyPI
(nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm; scripts/install-deps.sh installs them). Without
them the check skips (exit 77), saying so; with CI set it fails instead, as the checkpoint tests
do.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
KV_TYPES = {"float": ("fp32", 4), "__nv_bfloat16": ("bf16", 2), "__half": ("fp16", 2)}
MAX_INSTRUCTIONS_PER_512B = 111
MAX_SHUFFLES_PER_512B = 12
MAX_PAGED_RATIO = 1.05
BUDGET_MAX_G = 4  # the instruction and shuffle bounds hold up to this many heads per block


def ci():
    return os.environ.get("CI", "") not in ("", "0", "false")


def find_tool(name):
    """A CUDA binary tool: on PATH, in the toolkit, or from its PyPI package."""
    found = shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(os.path.join(home, "bin", name), os.X_OK):
            return os.path.join(home, "bin", name)
    try:  # the PyPI packages put it under site-packages/nvidia/cu<major>/bin
        import nvidia  # noqa: PLC0415
        for base in nvidia.__path__:
            for path in sorted(glob.glob(os.path.join(base, "cu*", "bin", name))):
                if os.access(path, os.X_OK):
                    return path
    except ImportError:
        pass
    return None


def functions(sass):
    """{mangled name: [(address, opcode, text)]} of one architecture's code in cuobjdump -sass
    output (an object or fatbin may hold several): sm_90's, else the first there is."""
    archs = {}
    current = None
    code = None
    for line in sass.splitlines():
        m = re.match(r"\s*code for (sm_\d+)", line)
        if m:
            code = archs.setdefault(m.group(1), {})
            current = None
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m and code is not None:
            current = code.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and current is not None:
            text = m.group(2).strip()
            op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0] if text else ""
            current.append((int(m.group(1), 16), op, text))
    if not archs:
        return {}
    return archs.get("sm_90", archs[sorted(archs)[0]])


def base(op):
    return op.split(".")[0]


def tile_loops(code):
    """The innermost backward-branch spans that hold an LDGSTS, shortest first."""
    spans = []
    for addr, op, text in code:
        if base(op) != "BRA":
            continue
        m = re.search(r"0x([0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        lo = int(m.group(1), 16)
        span = [c for c in code if lo <= c[0] <= addr]
        if any(base(c[1]) == "LDGSTS" for c in span):
            spans.append((lo, addr, span))
    inner = [s for s in spans
             if not any(o is not s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    return [s[2] for s in sorted(inner, key=lambda s: len(s[2]))]


def measure(span):
    copies = [op for _, op, _ in span if base(op) == "LDGSTS"]
    return {
        "length": len(span),
        "copies": len(copies),
        "narrow": sum(1 for op in copies if ".128" not in op),
        "global_loads": sum(1 for _, op, _ in span if base(op) in ("LDG", "LD")),
        "local": sum(1 for _, op, _ in span if base(op) in ("LDL", "STL")),
        "shuffles": sum(1 for _, op, _ in span if base(op) == "SHFL"),
    }


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def kernels(tool, env, obj, locator):
    """{(kv, head_dim, G): [tile loop measures, shortest first]} of one object's kernels."""
    sass = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, env=env)
    if sass.returncode != 0:
        raise RuntimeError(f"{tool} -sass {obj}: {sass.stderr.strip()}")
    funcs = functions(sass.stdout)
    names = demangle(list(funcs))
    out = {}
    for mangled, code in funcs.items():
        m = re.search(r"decode_attention_kernel<([^,]+), (\d+), (\d+), kvheap::(?:cuda::)?(\w+)>",
                      names[mangled])
        if not m or m.group(4) != locator or m.group(1) not in KV_TYPES or m.group(2) == "0":
            continue
        out[(m.group(1), int(m.group(2)), int(m.group(3)))] = [measure(s) for s in tile_loops(code)]
    return out


def label(key):
    return f"{KV_TYPES[key[0]][0]} head_dim {key[1]} G {key[2]}"


def check_kernel(key, loops, layout, failures):
    """Checks one kernel's loops; returns its measured loop's instructions per 512 B (or None)."""
    want = 2 if layout == "paged" else 1
    name = f"{layout} {label(key)}"
    if len(loops) != want:
        failures.append(f"{name}: {len(loops)} tile loops with asynchronous copies, expected "
                        f"{want}; is the K/V pipeline still there?")
        return None
    for loop in loops:
        if loop["narrow"]:
            failures.append(f"{name}: {loop['narrow']} of the loop's {loop['copies']} K/V copies "
                            "are narrower than 128 bits")
        if loop["global_loads"]:
            failures.append(f"{name}: {loop['global_loads']} global loads in the tile loop: K and V "
                            "must arrive by asynchronous copy, and a row's base or page ids be read "
                            "before the loop")
        if loop["local"]:
            failures.append(f"{name}: {loop['local']} local-memory accesses (spills) in the loop")
    fast = loops[0]
    per_512 = fast["length"] / fast["copies"]
    shuffles = fast["shuffles"] / fast["copies"]
    position_bytes = 2 * key[1] * KV_TYPES[key[0]][1]
    per_position = fast["shuffles"] / (fast["copies"] * 512 / position_bytes)
    print(f"{name}: {fast['length']} instructions, {fast['copies']} LDGSTS.128: "
          f"{per_512:.1f} instructions and {shuffles:.2f} shuffles per 512 B "
          f"({per_position:.2f} shuffles a position)"
          + (f"; general block-size loop {loops[1]['length'] / loops[1]['copies']:.1f} per 512 B"
             if len(loops) > 1 else ""))
    if key[2] <= BUDGET_MAX_G:
        if per_512 > MAX_INSTRUCTIONS_PER_512B:
            failures.append(f"{name}: {per_512:.1f} instructions per 512 B of K and V, above "
                            f"{MAX_INSTRUCTIONS_PER_512B}: the loop is issue-bound below an "
                            "H200's copy peak")
        if shuffles > MAX_SHUFFLES_PER_512B:
            failures.append(f"{name}: {shuffles:.2f} shuffles per 512 B, above "
                            f"{MAX_SHUFFLES_PER_512B}")
    return per_512


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("paged", "contiguous"):
        sys.exit(__doc__)
    layout = sys.argv[1]
    given = [o for arg in sys.argv[2:] for o in arg.split(";")]
    wanted = ["decode_attention.cu"] + (["paged_attention.cu"] if layout == "paged" else [])
    objs = {}
    for w in wanted:
        found = [o for o in given if os.path.basename(o).startswith(w)]
        if len(found) != 1:
            print(f"FAIL: no {w} object among {given}", file=sys.stderr)
            return 1
        objs[w] = found[0]
    tool, disasm = find_tool("cuobjdump"), find_tool("nvdisasm")  # cuobjdump runs nvdisasm
    if tool is None or disasm is None:
        missing = " and ".join(n for n, p in (("cuobjdump", tool), ("nvdisasm", disasm)) if not p)
        msg = (f"{missing} not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, or the PyPI "
               "packages nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm that "
               "scripts/install-deps.sh installs)")
        if ci():
            print(f"FAIL: {msg}, and CI must run this check", file=sys.stderr)
            return 1
        print(f"SKIP: {msg}")
        return SKIP
    env = dict(os.environ, NVDISASM_PATH=os.path.dirname(disasm))
    failures = []
    try:
        contiguous = kernels(tool, env, objs["decode_attention.cu"], "ContiguousLocator")
        paged = (kernels(tool, env, objs["paged_attention.cu"], "PagedLocator")
                 if layout == "paged" else {})
    except RuntimeError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    checked = contiguous if layout == "contiguous" else paged
    if not any(k[1] == 128 and k[2] == 4 and k[0] in ("float", "__nv_bfloat16") for k in checked):
        failures.append(f"no head_dim-128, G = 4 {layout} kernel for fp32 and bf16 found")
    for key in sorted(checked):
        per_512 = check_kernel(key, checked[key], layout, failures)
        if layout != "paged" or per_512 is None:
            continue
        if key not in contiguous or not contiguous[key]:
            failures.append(f"paged {label(key)}: no contiguous kernel to compare with")
            continue
        c = contiguous[key][0]
        ratio = per_512 / (c["length"] / c["copies"])
        print(f"  paged / contiguous {label(key)}: {ratio:.3f}")
        if ratio > MAX_PAGED_RATIO:
            failures.append(f"paged {label(key)}: {ratio:.3f} times the contiguous loop's "
                            f"instructions per 512 B, above {MAX_PAGED_RATIO}")
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
