"""keep_large_arrays_in_heap: large numpy temporaries reuse heap pages instead of being mapped afresh each time."""
import subprocess
import sys

import pytest

# allocate and free ten 64 MiB arrays; print the minor page faults it took
_FAULTS = """
import resource, sys
import numpy as np
if sys.argv[1] == "heap":
    from brownformer.cli import keep_large_arrays_in_heap
    assert keep_large_arrays_in_heap()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    a = np.ones(8 * 1024 * 1024)
    del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_repeated_large_arrays_fault_their_pages_in_once():
    mapped, heap = _faults("mmap"), _faults("heap")
    # mapped afresh, every array faults its pages in again (16384 4-KiB pages each, fewer with transparent huge
    # pages: 5440 in all, measured); from the heap only the first does (474)
    assert heap < mapped / 3
