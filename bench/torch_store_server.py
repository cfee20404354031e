#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""torch_store_server.py: runs PyTorch's own TCPStore server (the peer the
store benchmarks compare rdzvd with) on 127.0.0.1, prints its port on one
line ("port N") and serves until killed.  The interpreter picks the torch:
/usr/bin/python3 has 1.13 (its server speaks the 1.13 dialect), the venv of
scripts/deps.sh has 2.13 (libuv, the 2.x dialect).

Usage: PYTHON bench/torch_store_server.py [--host H] [--port P]
(port 0, the default, picks a free one).
"""
import argparse
import signal
import sys
import time

from torch.distributed import TCPStore


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    # world_size 1 and no waiting: the hosting instance's own client
    # counts as the only worker, so the server is ready at once.
    store = TCPStore(args.host, args.port, 1, True, wait_for_workers=False)
    print("port %d" % store.port, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
