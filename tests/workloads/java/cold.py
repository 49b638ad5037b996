#!/usr/bin/env python3
"""Writes Cold.java to stdout: Cold.inner, 1,100 statements, about 11,000
bytes of bytecode, more than HotSpot's HugeMethodLimit (8,000), so the JIT
never compiles it and Chains' `interp` mode stays in the interpreter."""


def source():
    body = "\n".join(f"\t\ts = s * {31 + i % 7} + {i};" for i in range(1100))
    return "final class Cold {\n\tstatic long inner(long n) {\n\t\tlong s = n;\n" + body + "\n\t\treturn s;\n\t}\n}\n"


if __name__ == "__main__":
    print(source(), end="")
