"""One lock per checkout between the engine commands and `railyard lab gc --all`.

`up`, `preview`, `down`, `recover` and verify's record of the node states hold it shared while
their engine runs; `gc --all` takes it exclusively, since objects a running `up` has just made are
in no state yet and would look like leftovers. An flock on `.railyard/engine.lock` goes with the
process that held it, so a killed command never leaves the checkout locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from railyard import paths


class CheckoutBusy(RuntimeError):
    pass


@contextlib.contextmanager
def checkout_lock(root: Path | None = None, *, exclusive: bool = False) -> Iterator[None]:
    """Shared: waits while a `gc --all` runs. Exclusive: refuses at once while any engine
    command holds the lock."""
    path = paths.local_dir(root) / "engine.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if exclusive:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CheckoutBusy(f"a railyard up/preview/down/recover/verify of this checkout is running ({path} "
                                   "is held); nothing was removed") from None
        else:
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
