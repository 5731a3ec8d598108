#!/usr/bin/env python3
"""The CPU weight products keep their accumulators in registers: no loop of a product kernel
moves a vector register to or from the stack.

  tests/kernels/check_product_loop.py OBJECT...   (ctest: KernelCode.ProductLoopKeepsItsSums)

OBJECTS are the build's kvheap_kernels objects; the check disassembles (objdump, from binutils)
the one compiled from matmul_cpu.cpp and looks at every instantiation of its register-tiled
kernel, block<T, MR, kAhead>, each a function of its own (block is never inlined). Its step loops
are the spans of its conditional backward branches that hold a multiply-add (vfmadd*, vdpbf16ps;
mulps and addps where the target has no FMA); an unconditional backward jump may return from code
placed out of line, whose span holds more than a loop. In the step loops no instruction may name
both a vector register (xmm, ymm, zmm) and the stack (rsp, rbp): that is a spilled accumulator,
weight vector or broadcast, written out and read back every step or every fetch.

Why it is checked: the kernel holds MR x NR accumulators, NR weight vectors and a broadcast, 28 of
the 32 vector registers with AVX-512, and the loop that fetches the next panel ahead was once
written so that GCC 12 kept some of the sums on the stack, with nothing wrong in its results
(docs/results/matmul-cpu-amd-epyc-zen4.md has what that cost).

With GCC 12 and Clang 14 it passes for a Zen 4's -march=native and for znver3; GCC's
icelake-server and skylake-avx512 pass too. The x86-64 baseline (SSE2, no F16C) is not checked:
there fp16 is widened through memory by design (tests/CMakeLists.txt registers the check for
native builds only).

x86-64 only; elsewhere, or without objdump, the check skips (exit 77), saying so; with CI set it
fails instead, as the checkpoint tests do.
"""
import os
import platform
import re
import shutil
import subprocess
import sys

SKIP = 77
MULTIPLY_ADD = re.compile(r"^(vfn?m(add|sub)\d+[ps][sd]|vdpbf16ps|v?mulps|v?addps)$")
CONDITIONAL = re.compile(r"^j(?!mp)[a-z]+$")
VECTOR_REGISTER = re.compile(r"%[xyz]mm\d+")
STACK = re.compile(r"\(%r[sb]p\)")
LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")


def ci():
    return os.environ.get("CI", "") not in ("", "0", "false")


def skip(why):
    if ci():
        print(f"FAIL: {why}, and CI must run this check")
        sys.exit(1)
    print(f"skipped: {why}")
    sys.exit(SKIP)


def functions(obj):
    """The disassembly of `obj`: {demangled name: [(address, mnemonic, operands)]}."""
    text = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", obj], check=True,
                          capture_output=True, text=True).stdout
    out, name = {}, None
    for line in text.splitlines():
        m = FUNCTION.match(line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = LINE.match(line)
        if m and name is not None:
            out[name].append((int(m.group(1), 16), m.group(2), m.group(3)))
    return out


def step_loops(code):
    """The loops that hold a multiply-add, as spans (first, last address) of conditional backward
    branches. (An unconditional backward jump may be the return from code placed out of line,
    whose span then holds more than a loop.)"""
    loops = []
    for addr, op, args in code:
        target = re.match(r"([0-9a-f]+)", args)
        if CONDITIONAL.match(op) and target and int(target.group(1), 16) < addr:
            first = int(target.group(1), 16)
            if any(first <= a <= addr and MULTIPLY_ADD.match(o) for a, o, _ in code):
                loops.append((first, addr))
    return loops


def main(objects):
    if platform.machine() not in ("x86_64", "AMD64"):
        skip(f"the check reads x86-64 code, and this is {platform.machine()}")
    if shutil.which("objdump") is None:
        skip("objdump (binutils) is not on PATH")
    found = [o for o in objects if os.path.basename(o).startswith("matmul_cpu.cpp.")]
    if not found:
        print(f"FAIL: no matmul_cpu.cpp object among the {len(objects)} given")
        return 1
    kernels = {name: code for name, code in functions(found[0]).items()
               if "::block<" in name and code}
    if not kernels:
        # Where the compiler inlined every block<> into product<>, the loops over panels and
        # blocks, which pass arguments on the stack, cannot be told from the step loops.
        skip("no block<...> kernel of its own in the object: inlined, or renamed")
    failures, loops = 0, 0
    for name, code in sorted(kernels.items()):
        bare = re.sub(r"\(anonymous namespace\)::|kvheap::cpu::", "", name)
        short = re.search(r"block<[^(]*", bare)[0].strip()
        spans = step_loops(code)
        if not spans:
            print(f"FAIL {short}: no loop with a multiply-add found")
            failures += 1
            continue
        loops += len(spans)
        spilled = [(a, o, args) for a, o, args in code
                   if any(f <= a <= l for f, l in spans)
                   and VECTOR_REGISTER.search(args) and STACK.search(args)]
        if spilled:
            failures += 1
            print(f"FAIL {short}: {len(spilled)} instructions in its step loops move a vector "
                  f"register to or from the stack, e.g.")
            for a, o, args in spilled[:3]:
                print(f"    {a:x}: {o} {args}")
    print(f"{len(kernels)} product kernels, {loops} step loops: "
          f"{'every one keeps its vectors in registers' if not failures else f'{failures} fail'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
