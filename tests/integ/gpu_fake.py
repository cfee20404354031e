# SPDX-License-Identifier: Apache-2.0
"""gpu_fake: librdzvworker's GPU path without a GPU.

tests/integ/gpu_fake_check drives the library's public API on one rank;
the library loads tests/integ/libfakegpu.so (fakegpu.c) as its CUDA
runtime and NCCL (RDZV_CUDART_LIBRARY, RDZV_NCCL_LIBRARY).  The fake keeps
a GPU's blocking rules (a copy into pageable memory waits for the kernel
before it, cudaFree waits for every stream) and can make a collective's
kernel never end, as a dead peer does.

What this proves: that librdzvworker starts with no libcudart or libnccl
on the machine and says where it looked when NCCL is wanted; which
backend and device it picks; that its staging, deadlines, aborts and
stream ordering never block past a deadline under those rules; that every
collective's data lands where it should on one rank.  What it does not:
anything about real kernels, NCCL's transports, several ranks on NCCL or
speed; scripts/gpu-check.sh checks those on a GPU.
"""

import os
import subprocess

import rdzvtest as rt
import worker_lib as wl

RDZV_ETIMEDOUT = -5


def fake():
    p = os.path.join(rt.top_builddir(), "tests", "integ", ".libs",
                     "libfakegpu.so")
    if not os.path.exists(p):
        rt.skip("no libfakegpu.so: librdzvworker built without the CUDA "
                "and NCCL headers")
    return p


def env(extra=None, lib=None):
    e = wl.base_env()
    e.pop("RDZV_BACKEND", None)
    for k in list(e):
        if k.startswith("FAKE_"):
            del e[k]
    if lib is not None:
        e["RDZV_CUDART_LIBRARY"] = lib
        e["RDZV_NCCL_LIBRARY"] = lib
    e.update(extra or {})
    return e


def run(args, e, timeout=60, rc=0):
    """Runs gpu_fake_check args; a run past timeout (a hang) fails."""
    try:
        p = subprocess.run([wl.prog("gpu_fake_check")] + args, env=e,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as x:
        raise AssertionError("gpu_fake_check %s hung (killed after %d s); "
                             "stdout %r stderr %r" %
                             (args, timeout, x.stdout, x.stderr))
    assert p.returncode == rc, "gpu_fake_check %s: rc %d, want %d\n%s\n%s" % (
        args, p.returncode, rc, p.stdout[-2000:], p.stderr[-2000:])
    return p.stdout, p.stderr


def test_no_gpu_libraries_needed():
    """Nothing of CUDA or NCCL is linked in: with neither to be found, a
    program starts and gets the cpu backend; asked for nccl, it fails in
    one line that says where it looked and what to set."""
    lib = os.path.join(rt.top_builddir(), "libworker", ".libs",
                       "librdzvworker.so")
    needed = subprocess.run(["readelf", "-d", lib], capture_output=True,
                            text=True).stdout
    assert "(NEEDED)" in needed, needed
    for name in ("libnccl.so", "libcudart.so"):
        assert name not in needed, needed
    missing = {"RDZV_CUDART_LIBRARY": "/nonexistent/libcudart.so.13",
               "RDZV_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"}
    out, _ = run(["backend"], env(missing))
    assert "backend cpu" in out, out
    e = env({"RDZV_BACKEND": "nccl", "RDZV_CUDART_LIBRARY": fake(),
             "RDZV_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    out, err = run(["backend"], e, rc=2)
    line = [l for l in err.splitlines() if l.startswith("init failed")]
    assert line, err
    assert "libnccl.so.2 not found" in line[0], line
    assert "RDZV_NCCL_LIBRARY=/nonexistent/libnccl.so.2" in line[0], line
    assert "RDZV_BACKEND=cpu" in line[0], line
    print("  " + line[0][:200], flush=True)


def test_finds_the_nccl_installed_here():
    """The real libcudart and libnccl of this machine, found without any
    variable (the dynamic linker's path, then the directories configure
    found): nccl then fails for want of a device, not of the library."""
    fake()
    e = env({"RDZV_BACKEND": "nccl"})
    out, err = run(["backend"], e, rc=2)
    assert "not found" not in err, err
    assert "no CUDA device is visible" in err, err


def test_auto_picks_nccl_on_a_gpu_of_its_own():
    out, _ = run(["backend"], env(lib=fake()))
    assert "backend nccl device 0" in out, out


def test_ranks_sharing_a_gpu_get_cpu():
    """2 ranks, 1 GPU: NCCL would refuse them (the fake, one rank only,
    refuses any 2-rank communicator), so auto must choose cpu."""
    res = wl.run_ok(2, [wl.prog("gpu_fake_check"), "backend"],
                    store="tcpstore", env=env({"RDZV_BACKEND": "auto"},
                                              lib=fake()), timeout=60)
    for rc, out, err in res:
        assert "backend cpu device -1" in out, (out, err)
        assert "NCCL wants one GPU per rank" in err, err


def test_old_nccl_refused():
    e = env({"RDZV_BACKEND": "nccl", "FAKE_NCCL_VERSION": "21300"},
            lib=fake())
    _, err = run(["backend"], e, rc=2)
    assert "version 21300, 21400 or later needed" in err, err


def test_every_collective_host_and_device():
    out, _ = run(["coll"], env(lib=fake()))
    assert "coll ok backend nccl" in out, out


def test_deadline_on_host_buffers():
    """A collective that never ends (a dead peer), host buffers: the call
    returns at its deadline, and finalize does not hang either."""
    out, err = run(["hang", "host", "1500"],
                   env({"FAKE_NCCL_HANG": "1"}, lib=fake()))
    assert "allreduce returned %d" % RDZV_ETIMEDOUT in out, (out, err)
    assert "finalized" in out, out


def test_iallreduce_on_host_buffers_is_asynchronous():
    out, err = run(["hang", "ihost", "1500"],
                   env({"FAKE_NCCL_HANG": "1"}, lib=fake()))
    assert "iallreduce returned 0" in out, (out, err)
    assert "wait returned %d" % RDZV_ETIMEDOUT in out, (out, err)
    assert "finalized" in out, out


def test_no_device_free_behind_a_hung_kernel():
    """A device iallreduce hangs; a larger host allreduce then grows the
    staging buffer: the old one must not be freed (cudaFree waits for the
    hung kernel) but retired; the call times out instead."""
    out, err = run(["hang", "grow", "1500"],
                   env({"FAKE_NCCL_HANG": "2"}, lib=fake()))
    assert "big allreduce returned %d" % RDZV_ETIMEDOUT in out, (out, err)
    assert "wait returned" in out, out
    assert "finalized" in out, out


def test_abort_from_another_thread():
    out, err = run(["hang", "abort", "300"],
                   env({"FAKE_NCCL_HANG": "1"}, lib=fake()))
    assert "aborting" in out, out
    rcs = [l for l in out.splitlines() if l.startswith("allreduce returned")]
    assert rcs and int(rcs[0].split()[-1]) < 0, out
    assert "finalized" in out, out


def test_abort_and_reinit():
    """The repair path's backend half: rdzv_abort from another thread
    (the watcher), then a new communicator, three times over."""
    out, err = run(["reinit", "3"], env(lib=fake()))
    assert "reinit ok 3" in out, (out, err)
    assert err.count("nccl 2.") >= 4, err


def test_ordered_after_the_default_stream():
    """The caller's kernel on the default stream fills the send buffer
    late: the allreduce must read the filled buffer."""
    out, err = run(["order"], env(lib=fake()))
    assert "has the fill" in out, (out, err)


if __name__ == "__main__":
    rt.main(globals(), per_test=90.0, total=400.0)
