"""Run one railyard command in a fresh process and report its wall time and peak memory.

`python -m railyard.bench.measure ARGS...` runs `railyard ARGS...` (output discarded) and prints
{"wall_s", "peak_rss_mib", "rc"} as JSON: a fresh interpreter per sample, so imports and the
catalog load are counted as a user pays them.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import time


def main() -> None:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        from railyard.cli import main as cli

        rc = cli(sys.argv[1:])
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "peak_rss_mib": peak, "rc": rc}))


if __name__ == "__main__":
    main()
