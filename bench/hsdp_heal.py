# SPDX-License-Identifier: Apache-2.0
"""hsdp_heal.py: what healing a replica group costs against the model's
size: HSDP (2 replica groups x 2 shards, FSDP2 on gloo) under a real rdzvd
and two rdzv-agents, examples/torch_hsdp_repair.py at about 1, 10 and
100 M parameters, replica 0's shard 1 SIGKILLing itself in step 3.

    python3 bench/hsdp_heal.py BUILDDIR [--reps 3] [--sizes 1,10,100]

The failed group's two ranks (the replacement and its survivor, whose
model and optimizer are made again) each receive their shard from the
healthy replica; each reports (REPORT line) the heal's time (heal_s: from
when it waits for its donor; xfer_s: from the donor's first message, the
transfer itself, which time_x compares), its bytes
(parameter shards and optimizer state) and its peak resident memory over
what it had when the heal began (Linux's clear_refs/VmHWM).  Beside it,
in this process: the same bytes sent once over a loopback TCP socket
(the cost of moving the shard at all).  Targets: peak extra memory at
most one shard (the bytes received), time within 2x of the loopback send.
Prints one line per run, then median [min max] per size.
"""

import argparse
import json
import os
import re
import socket
import threading
import time

import figures
import harness

REPORT_RE = re.compile(r"^(?:\[\w+\]:)?REPORT (\{.*\})$", re.M)
# dim, layers: 8 dim^2 per layer, about 1, 10 and 100 M parameters.
SIZES = {1: (128, 8), 10: (400, 8), 100: (1024, 12)}


def loopback_send(nbytes):
    """Seconds to send nbytes once over a loopback TCP connection (into a
    buffer the receiver made beforehand)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    src = bytearray(nbytes)
    dst = bytearray(nbytes)

    def recv():
        c, _ = srv.accept()
        view, got = memoryview(dst), 0
        while got < nbytes:
            got += c.recv_into(view[got:])
        c.close()
    t = threading.Thread(target=recv)
    t.start()
    c = socket.create_connection(srv.getsockname())
    t0 = time.monotonic()
    c.sendall(src)
    t.join()
    dt = time.monotonic() - t0
    c.close()
    srv.close()
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="1,10,100")
    ap.add_argument("--python", default=harness.TORCH2_PYTHON)
    a = ap.parse_args()
    src = harness.use_build(a.build)
    import rdzvtest as rt
    from agent_lib import Scope, conf

    def run(size, rep):
        dim, layers = SIZES[size]
        d = rt.Rdzvd()
        job = "heal%d-%d" % (size, rep)
        argv = ["--nnodes", "2", "--nproc_per_node", "2",
                "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv_id", job, "--max_restarts", "0", "--grace", "2",
                "--rdzv_conf", conf(0.2, 5.0, "replicas=2")]
        # Long enough that the healthy replica still steps when the
        # replacement is ready: 0.05 s of emulated compute a step.
        prog = [os.path.join(src, "examples", "torch_hsdp_repair.py"),
                "--epochs", "1", "--dim", str(dim), "--layers",
                str(layers), "--batch", "2", "--samples",
                str(2048 if size < 100 else 96), "--step-delay", "0.05",
                "--die-at", "3", "1"]
        env = {"PYTHON": a.python, "GLOO_SOCKET_IFNAME": "lo",
               "OMP_NUM_THREADS": "1"}
        try:
            with Scope("hsdp-heal-") as s:
                x = [s.agent(argv, env=env, program=prog) for _ in range(2)]
                for y in x:
                    rc = y.wait(900)
                    assert rc == 0, (rc, y.output()[-3000:])
                o = "".join(y.output() for y in x)
        finally:
            d.stop()
        healed = [r for r in map(json.loads, REPORT_RE.findall(o))
                  if r["heals"]]
        assert len(healed) == 2, o[-3000:]
        nbytes = max(r["heal_bytes"] for r in healed)
        return {"heal_s": max(r["heal_s"] for r in healed),
                "xfer_s": max(r["heal_xfer_s"] for r in healed),
                "send_s": loopback_send(nbytes),
                "shard_mib": nbytes / 2 ** 20,
                "peak_mib": max(r["heal_peak"] for r in healed) / 2 ** 20}

    figs = {}
    for size in [int(x) for x in a.sizes.split(",")]:
        for rep in range(a.reps):
            row = run(size, rep)
            row["time_x"] = row["xfer_s"] / row["send_s"]
            row["peak_x"] = row["peak_mib"] / row["shard_mib"]
            figures.show(figs, size, "%3d M rep %d " % (size, rep + 1),
                         row)
    figures.medians(figs, "%3d M %-9s median %9.3f [%.3f %.3f] of %d")


if __name__ == "__main__":
    main()
