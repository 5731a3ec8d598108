#!/usr/bin/env python3
"""The machine code of decode attention's position loop loads what each position needs, no more.

  tests/check_position_loop.py paged OBJECTS...       (ctest: KernelCode.PagedLoopWalksNoPageTableChain)
  tests/check_position_loop.py contiguous OBJECTS...  (ctest: KernelCode.ContiguousLoopLoadsNoBaseRow)

OBJECTS are the real build's kvheap_kernels_cuda objects; the check reads the sm_90 code (else
the first architecture's) of paged_attention.cu.o or decode_attention.cu.o among them (or of a
fatbin of that name). The script disassembles
it with cuobjdump -sass, finds the head_dim-128, G = 4 kernel for fp32 and bf16 KV, and takes as
the position loop the backward branch whose span holds the most K/V vector loads (LDG/LD of 64 or
128 bits). It counts instruction classes there, not exact text:

  paged:      no 32-bit load in the loop takes its address from another 32-bit load there: each
              position reads its block id from the page table found before the loop. Walking
              row_seq[i] -> indptr[seq] -> indices[..] again for every position chains three.
  contiguous: no 64-bit load in the fp32 kernel's loop other than K and V, whose vectors are 128
              bits: base_row[i] (an int64) is read once, before the loop.
  both:       no local-memory load or store (LDL/STL: spills) in the loop.

cuobjdump and the nvdisasm it runs come with the CUDA toolkit, or from PyPI
(nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm; scripts/install-deps.sh installs them). Without it the check skips (exit 77), saying so; with CI set
it fails instead, as the checkpoint tests do.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
KV_TYPES = {"float": "fp32", "__nv_bfloat16": "bf16"}


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


def load_class(op):
    """'vector64', 'vector128', 'scalar' (32 bits or less) for global/generic loads; else None."""
    parts = op.split(".")
    if parts[0] not in ("LDG", "LD"):
        return None
    if "128" in parts:
        return "vector128"
    if "64" in parts:
        return "vector64"
    return "scalar"


def position_loop(code):
    """Instructions of the backward-branch span with the most vector loads (the smallest on ties)."""
    best = None
    for i, (addr, op, text) in enumerate(code):
        if not op.startswith("BRA"):
            continue
        m = re.search(r"0x([0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        target = int(m.group(1), 16)
        span = [c for c in code if target <= c[0] <= addr]
        vectors = sum(1 for c in span if (load_class(c[1]) or "").startswith("vector"))
        key = (vectors, -len(span))
        if best is None or key > best[0]:
            best = (key, span)
    return best[1] if best else []


def registers(operand):
    """General registers an operand names: R4 -> {4}, R4.64 -> {4, 5}; RZ and others -> {}."""
    out = set()
    for m in re.finditer(r"\bR(\d+)(?:\.(64|128))?\b", operand):
        width = {"64": 2, "128": 4}.get(m.group(2), 1)
        out |= set(range(int(m.group(1)), int(m.group(1)) + width))
    return out


def chained_loads(span):
    """32-bit loads whose address derives, within the span, from another 32-bit load's result:
    the dependent chain row_seq[i] -> indptr[..] -> indices[..]. Registers are followed forward
    through the span's control flow (forward branches; the loop's back edge ignored): a value any
    instruction computes from a loaded one counts as loaded, one written from other values (on
    every path, unpredicated) does not."""
    chained = 0
    state = set()  # registers holding a loaded value, on the path being followed
    reachable = True
    pending = {}  # address -> registers loaded on a forward branch to it
    for addr, op, text in span:
        if addr in pending:
            state = (state if reachable else set()) | pending.pop(addr)
            reachable = True
        if not reachable:
            continue
        predicated = text.startswith("@")
        if op.split(".")[0] in ("BRA", "JMP", "EXIT", "RET"):
            m = re.search(r"0x([0-9a-f]+)", text)
            if m and int(m.group(1), 16) > addr:
                pending[int(m.group(1), 16)] = pending.get(int(m.group(1), 16), set()) | state
            if not predicated and not op.startswith("BRA.DIV"):
                reachable = False
            continue
        body = re.sub(r"^@!?U?P\w+\s+", "", text)
        operands = [o.strip() for o in body[len(op):].split(",")] if " " in body else []
        if not operands or op.split(".")[0] in ("ST", "STG", "STS", "STL", "BAR"):
            continue
        dest, sources = operands[0], ",".join(operands[1:])
        width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
        first = min(registers(dest)) if registers(dest) else None
        dest_regs = set(range(first, first + width)) if first is not None else set()
        kind = load_class(op)
        from_load = bool(registers(sources) & state)
        if kind == "scalar" and from_load:
            chained += 1
        if kind == "scalar" or (kind is None and from_load):
            state |= dest_regs
        elif not predicated:
            state -= dest_regs
    return chained


def counts(span):
    c = {"vector64": 0, "vector128": 0, "scalar": 0, "local": 0, "chained": chained_loads(span)}
    for _, op, _ in span:
        k = load_class(op)
        if k:
            c[k] += 1
        if op.split(".")[0] in ("LDL", "STL"):
            c["local"] += 1
    return c


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("paged", "contiguous"):
        sys.exit(__doc__)
    layout = sys.argv[1]
    wanted = "paged_attention.cu" if layout == "paged" else "decode_attention.cu"
    given = [o for arg in sys.argv[2:] for o in arg.split(";")]
    objs = [o for o in given if os.path.basename(o).startswith(wanted)]
    if len(objs) != 1:
        print(f"FAIL: no {wanted} object among {given}", file=sys.stderr)
        return 1
    obj = objs[0]
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
    sass = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, env=env)
    if sass.returncode != 0:
        print(f"FAIL: {tool} -sass {obj}: {sass.stderr.strip()}", file=sys.stderr)
        return 1
    funcs = functions(sass.stdout)
    names = demangle(list(funcs))
    locator = "PagedLocator" if layout == "paged" else "ContiguousLocator"
    failures = []
    checked = 0
    for mangled, code in funcs.items():
        m = re.search(r"decode_attention_kernel<([^,]+), 128, 4, kvheap::(?:cuda::)?(\w+)>",
                      names[mangled])
        if not m or m.group(2) != locator or m.group(1) not in KV_TYPES:
            continue
        kv = KV_TYPES[m.group(1)]
        if layout == "contiguous" and kv != "fp32":
            continue  # bf16's 64-bit K/V vectors could not be told from base_row's int64 load
        checked += 1
        loop = position_loop(code)
        c = counts(loop)
        vectors = c["vector64"] + c["vector128"]
        positions = vectors // 2
        print(f"{layout} {kv}: position loop of {len(loop)} instructions: {c['vector128']} 128-bit "
              f"and {c['vector64']} 64-bit loads ({positions} positions), {c['scalar']} 32-bit "
              f"loads of which {c['chained']} take their address from another, "
              f"{c['local']} local loads/stores")
        if positions == 0:
            failures.append(f"{kv}: no K/V loads found in any loop; is this the attention kernel?")
            continue
        if c["local"]:
            failures.append(f"{kv}: {c['local']} local-memory accesses (spills) in the loop")
        if layout == "paged" and c["chained"]:
            failures.append(f"{kv}: {c['chained']} 32-bit loads in the loop take their address from "
                            "another load there: the page-table chain (row_seq -> indptr -> "
                            "indices) is being walked again for every position")
        if layout == "contiguous" and c["vector64"]:
            failures.append(f"{kv}: {c['vector64']} 64-bit loads in the loop: base_row[i] is being "
                            "read again for every position")
    if checked == 0:
        failures.append(f"no head_dim-128, G = 4 {locator} kernel in {obj}")
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
