"""`services.aggregator.server.keep_job_memory`: with it, a block of an aggregation job's size
comes from malloc's heap (the process's [heap] in /proc/self/maps, as the kernel lists it),
where glibc's defaults map it on its own, and so does a thread's, where glibc's defaults give
each new thread a heap of its own. Each case runs in a fresh interpreter: the settings are the
process's."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import ctypes, sys, threading
from services.aggregator.server import keep_job_memory

def in_heap(address):
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("[heap]"):
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                return start <= address < end
    return False

def block_in_heap():
    block = bytearray(20 << 20)  # an aggregation job's temporaries are a few MiB to tens
    return in_heap(ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block)))

tuned = keep_job_memory() if sys.argv[1] == "tuned" else None
# The main thread's first: a freed mapping raises glibc's default threshold for later ones.
found = [block_in_heap()]
thread = threading.Thread(target=lambda: found.append(block_in_heap()))
thread.start()
thread.join()
print(tuned, *found)
"""

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the settings are glibc's mallopt(3)"
)


def _probe(mode: str) -> tuple[str, str, str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    return out[0], out[1], out[2]


def test_glibc_maps_a_large_block_on_its_own_by_default() -> None:
    # In the main thread and in another (whose heap of its own is a mapping too).
    assert _probe("default") == ("None", "False", "False")


def test_kept_job_memory_serves_the_block_from_the_heap_in_every_thread() -> None:
    assert _probe("tuned") == ("True", "True", "True")
