#!/usr/bin/env python3
"""Which LeakSanitizer reports are hypic's own: scripts/ci/sanitize.sh fails the job on those.

Takes: well under a second for a suite's logs.

    python3 scripts/ci/leak_judge.py ROOT LOG...

A leaked block is hypic's when the first frame of its allocation stack that is not the
allocator is in hypic's sources (ROOT/src, ROOT/kernels, ROOT/tests, or the same folders as a
path relative to the build directory, as a build through ccache with CCACHE_BASEDIR names
them). Frames of the allocator are the sanitizer runtime's, the C and C++ runtime libraries'
(libc, libstdc++, libgcc_s) and inline code from system headers (/usr/include: the standard
library's containers, nlohmann::json, CLI11). A block whose first other frame is in a library
(Open MPI, PMIx, HDF5, an unloaded plugin: "<unknown module>") is that library's.

Only the first such frame decides, so the rule holds with the fast frame-pointer unwinder the
suite uses (fast_unwind_on_malloc=1): past a library frame built without frame pointers that
unwinder may read garbage, which must not decide. Prints each of hypic's leaks (its record) and,
last, "hypic-leaks N"; exits 0 either way (the shell script decides).
"""
import re
import sys

root = sys.argv[1].rstrip("/")
hypic = re.compile(r"(%s/|(?<![\w.])(\.\./)+)(src|kernels|tests)/" % re.escape(root))
runtime = re.compile(
    r"src/libsanitizer/|/libasan\.so|/libubsan\.so|/libc\.so|/libstdc\+\+\.so|/libgcc_s\.so|"
    r" /usr/include/| in (__interceptor_|operator new|operator delete|malloc|calloc|realloc)")
header = re.compile(r"^(Direct|Indirect) leak of \d+ byte")
frame = re.compile(r"^\s+#\d+ ")

found = 0
for path in sys.argv[2:]:
    record = []
    with open(path, errors="replace") as log:
        lines = log.read().split("\n") + [""]
    for line in lines:
        if header.match(line):
            record = [line]
            continue
        if record and frame.match(line):
            record.append(line)
            continue
        if len(record) > 1:
            first = next((f for f in record[1:] if not runtime.search(f)), None)
            if first is not None and hypic.search(first) and "src/libsanitizer/" not in first:
                found += 1
                print(f"{path}:")
                print("\n".join(record))
        record = []
print(f"hypic-leaks {found}")
