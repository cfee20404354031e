# SPDX-License-Identifier: Apache-2.0
"""dp_train.py: the data-parallel step end to end, and examples/ddp_mlp.

Real ranks on 127.0.0.1 (started directly with RANK/WORLD_SIZE and a
rank-0-hosted TCPStore, or through rdzvd's native protocol, or under
torchrun 1.13 --no_python), training on a subset of Debian's Fashion-MNIST
so each run takes seconds.  Checks:
  - rdzv_dp_* on its own (tests/integ/dp_check.c) with 1 to 5 ranks;
  - it learns: the loss falls and test accuracy passes what a short run on
    6000 samples reaches (the full >= 85% run: bench/runs/2026-11-22.md);
  - world sizes 1 to 4 with one global batch follow one loss curve (the
    sampler's global order and the averaged gradient make it one
    computation, up to rounding);
  - a rank killed with SIGKILL mid-epoch makes the survivor fail within
    the timeout instead of hanging, and the job restarted (by hand, on
    fewer ranks, or by rdzv-agent in a new round) resumes from the
    checkpoint and ends exactly where an uninterrupted run ends;
  - the GPU paths (nccl backend, the CUDA model), skipped with the reason
    where there is no GPU;
  - bad arguments, a missing data set and a corrupt checkpoint are
    refused with a message.
"""

import os
import re
import subprocess
import sys
import time

import rdzvtest as rt
import worker_lib as wl

DATA = "/usr/share/datasets/fashion-mnist"
EPOCH_RE = re.compile(r"^epoch (\d+) loss ([0-9.]+) train_acc ([0-9.]+) "
                      r"test_acc ([0-9.]+) samples/s (\d+) time ([0-9.]+)s$",
                      re.M)
FINAL_RE = re.compile(r"^final test_acc ([0-9.]+)$", re.M)
# Small and quick: 6000 samples (divisible by 1..5 ranks, so no padding
# changes the global batches), a narrow hidden layer.
SMALL = ["--limit", "6000", "--hidden", "32", "--test-limit", "2000",
         "--lr", "0.1", "--threads", "1"]


def prog():
    return os.path.join(rt.top_builddir(), "examples", "ddp_mlp")


def epochs(out):
    """[(epoch, loss, train_acc, test_acc)] from rank 0's output."""
    return [(int(m.group(1)), float(m.group(2)), float(m.group(3)),
             float(m.group(4))) for m in EPOCH_RE.finditer(out)]


def final_acc(out):
    m = FINAL_RE.search(out)
    assert m, "no final line in:\n" + out[-2000:]
    return float(m.group(1))


def run(n, args, timeout=120.0, env=None, **kw):
    """n ranks of ddp_mlp; returns rank 0's output (all must exit 0)."""
    res = wl.run_ok(n, [prog()] + args, timeout=timeout, store="tcpstore",
                    env=env, **kw)
    return res[0][1]


def test_dp_step():
    """tests/integ/dp_check: broadcast, bucketed averaging, 1 to 5 ranks."""
    check = os.path.join(rt.top_builddir(), "tests", "integ", "dp_check")
    if not os.path.exists(check):
        rt.skip("tests/integ/dp_check not built")
    for n in (1, 2, 3, 4, 5):
        res = wl.run_ok(n, [check], timeout=120, store="tcpstore")
        for r, (rc, out, err) in enumerate(res):
            assert out.strip() == "dp_check ok rank %d" % r, (n, r, out, err)
    d = rt.Rdzvd()
    try:
        wl.run_ok(3, [check], timeout=120, store="native", d=d)
    finally:
        d.stop()


def test_learns():
    out = run(1, SMALL + ["--epochs", "2", "--batch", "20"])
    ep = epochs(out)
    assert [e[0] for e in ep] == [1, 2], out
    assert ep[1][1] < ep[0][1] < 1.5, ep          # the loss falls
    # 2 epochs of 6000 samples: about 0.79; chance is 0.10.
    assert ep[1][3] >= 0.74, ep
    assert final_acc(out) == ep[1][3]
    # A progress line during the epoch, rank 0 only.
    assert re.search(r"^  epoch 1  50% step \d+/\d+ loss [0-9.]+ "
                     r"samples/s \d+$", out, re.M), out


def test_same_curve_world_sizes():
    """Global batch 60 split over 1, 2, 3 and 4 ranks: one loss curve."""
    curves = {}
    for n in (1, 2, 3, 4):
        out = run(n, SMALL + ["--epochs", "2", "--batch", str(60 // n)])
        assert ("world %d " % n) in out, out
        curves[n] = epochs(out)
        assert len(curves[n]) == 2, out
    base = curves[1]
    for n in (2, 3, 4):
        for (e1, l1, a1, t1), (en, ln, an, tn) in zip(base, curves[n]):
            assert e1 == en
            # Sums over ranks round differently; nothing else differs.
            assert abs(ln - l1) <= 1e-4 * l1, (n, base, curves[n])
            assert abs(an - a1) <= 2.0 / 6000, (n, base, curves[n])
            assert abs(tn - t1) <= 5.0 / 2000, (n, base, curves[n])


def test_kill_and_resume():
    """SIGKILL one rank mid-epoch 2; the survivor fails in bounded time;
    restarted, the job resumes and ends exactly like an unbroken run."""
    d = rt.mktemp()
    ck = os.path.join(d, "ck.bin")
    args = ["--limit", "12000", "--hidden", "32", "--test-limit", "2000",
            "--threads", "1", "--epochs", "2", "--batch", "30"]
    ref = run(2, args)
    env = {"RDZV_TIMEOUT_MS": "10000"}
    t0 = time.monotonic()
    res = wl.Group(2, [prog()] + args + [
        "--checkpoint", ck, "--checkpoint-every", "20",
        "--exit-after", "290", "--crash-rank", "1"],
        store="tcpstore", env=env).wait(60)
    took = time.monotonic() - t0
    (rc0, out0, err0), (rc1, _, err1) = res
    assert rc1 == -9, (rc1, err1)
    assert rc0 == 1, (rc0, out0[-1000:], err0[-1000:])
    assert "rank 0" in err0 and "rdzv_" in err0, err0
    assert took < 30, took          # an error, not a hang to the timeout
    # Step 290 of 200 per epoch: epoch 1 done, the last checkpoint at
    # step 280 = 80 steps (4800 samples) into epoch 2.
    assert epochs(out0)[0] == epochs(ref)[0], (out0, ref)
    assert os.path.exists(ck)
    assert not [f for f in os.listdir(d) if ".tmp." in f], os.listdir(d)

    out = run(2, args + ["--checkpoint", ck, "--checkpoint-every", "20"],
              env=env)
    assert "resumed from %s: epoch 2, 4800 samples done" % ck in out, out
    assert epochs(out) == epochs(ref)[1:], (out, ref)
    assert final_acc(out) == final_acc(ref)

    # A finished job restarted again trains no more and says where it is.
    out = run(2, args + ["--checkpoint", ck], env=env)
    assert epochs(out) == [] and final_acc(out) == final_acc(ref), out


def launch(argv, env):
    """Runs launcher argv (rdzv-agent, torchrun) with env to its end;
    asserts it exited 0; returns its output."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    rt._track(p)
    try:
        out, _ = p.communicate(timeout=150)
    finally:
        rt._untrack(p)
    assert p.returncode == 0, out[-3000:]
    return out


def run_agent(argv, env=None):
    """Runs rdzv-agent argv (a job whose rank SIGKILLs itself) to its
    end; asserts it exited 0 after that death; returns its output."""
    e = {"RDZV_TIMEOUT_MS": "10000"}
    e.update(env or {})
    out = launch(argv, wl.base_env(e))
    assert "SIGKILL to myself" in out, out[-3000:]
    return out


def test_agent_restart():
    """Under rdzv-agent: a rank SIGKILLs itself mid-epoch, the agent
    restarts the group in a new round, and the job resumes from its
    checkpoint to the uninterrupted run's result."""
    agent = os.path.join(rt.top_builddir(), "agent", "rdzv-agent")
    if not os.path.exists(agent):
        rt.skip("agent/rdzv-agent not built")
    d = rt.mktemp()
    ck = os.path.join(d, "ck.bin")
    args = ["--limit", "12000", "--hidden", "32", "--test-limit", "2000",
            "--threads", "1", "--epochs", "2", "--batch", "30"]
    ref = run(2, args)
    argv = [agent, "--standalone", "--nproc_per_node", "2",
            "--max_restarts", "1", "--no_python", "--", prog()] + args + [
            "--checkpoint", ck, "--checkpoint-every", "20",
            "--exit-after", "290", "--crash-rank", "1"]
    # This test is about the restart from a checkpoint: with repair on
    # (ddp_mlp's default under an agent) the crash would be repaired in
    # place instead (tests/integ/repair_agent.py covers that).
    out = run_agent(argv, {"RDZV_REPAIR": "0"})
    assert "resumed from %s: epoch 2, 4800 samples done" % ck in out, \
        out[-3000:]
    # Lines come prefixed with the local rank ("[default0]:").
    m = re.findall(r"epoch 2 loss ([0-9.]+) train_acc ([0-9.]+) "
                   r"test_acc ([0-9.]+)", out)
    want = epochs(ref)[1]
    assert m and (float(m[-1][0]), float(m[-1][2])) == (want[1], want[3]), \
        (m, want)
    assert re.search(r"final test_acc %.4f" % final_acc(ref), out), out


def test_agent_late_failure_repair():
    """Under rdzv-agent with repair on: a rank dies 5 steps before the
    end, the survivor finishes them alone before the replacement is
    ready; the agent stops the replacement it no longer needs and the
    job succeeds (it used to wait for a grow round that could never
    form)."""
    agent = os.path.join(rt.top_builddir(), "agent", "rdzv-agent")
    if not os.path.exists(agent):
        rt.skip("agent/rdzv-agent not built")
    args = ["--limit", "12000", "--hidden", "32", "--test-limit", "2000",
            "--threads", "1", "--epochs", "2", "--batch", "30"]
    argv = [agent, "--standalone", "--nproc_per_node", "2",
            "--max_restarts", "0", "--no_python", "--", prog()] + args + [
            "--exit-after", "395", "--crash-rank", "1"]
    out = run_agent(argv)
    # Repaired, not restarted (--max_restarts 0 would fail the job).
    assert "replacement pid" in out, out[-3000:]
    assert "training ended before its replacement joined" in out or \
        "replacement is ready, but training ended" in out, out[-3000:]
    assert re.search(r"final test_acc [0-9.]+", out), out[-3000:]


def test_resume_on_fewer_ranks():
    """A checkpoint from 2 ranks resumes on 1 with the same global batch."""
    d = rt.mktemp()
    ck = os.path.join(d, "ck.bin")
    args = SMALL + ["--epochs", "2"]
    ref = run(1, args + ["--batch", "60"])
    res = wl.Group(2, [prog()] + args + [
        "--batch", "30", "--checkpoint", ck, "--checkpoint-every", "10",
        "--exit-after", "130"], store="tcpstore").wait(60)
    assert [r[0] for r in res] == [3, 3], res
    out = run(1, args + ["--batch", "60", "--checkpoint", ck])
    assert "resumed from %s: epoch 2, 1800 samples done" % ck in out, out
    got, want = epochs(out), epochs(ref)[1:]
    assert len(got) == 1 and abs(got[0][1] - want[0][1]) < 1e-4 * want[0][1]


def test_native_store():
    """Bootstrap through rdzvd's native protocol, as under rdzv-agent."""
    d = rt.Rdzvd()
    try:
        res = wl.run_ok(2, [prog()] + SMALL + ["--epochs", "1", "--batch",
                                                "30"], timeout=120,
                        store="native", d=d)
        assert len(epochs(res[0][1])) == 1, res[0][1]
        assert res[1][1] == "", res[1][1]      # only rank 0 prints
    finally:
        d.stop()


def test_torchrun():
    """Under unmodified torchrun 1.13 (--no_python), its TCPStore."""
    try:
        import torch  # noqa: F401  (only to know torchrun is there)
    except ImportError:
        rt.skip("no torch in %s" % sys.executable)
    port = rt.free_port()
    argv = [sys.executable, "-m", "torch.distributed.run",
            "--nproc_per_node", "2", "--master_port", str(port),
            "--redirects", "9:1", "--tee", "9:1", "--no_python", prog()]
    argv += SMALL + ["--epochs", "1", "--batch", "30"]
    out = launch(argv, wl.base_env())
    assert re.search(r"epoch 1 loss [0-9.]+ train_acc [0-9.]+ test_acc "
                     r"0\.[0-9]{4}", out), out[-3000:]


def gpu_skip_reason():
    """Why the GPU tests cannot run here, or None."""
    try:
        with open(os.path.join(rt.top_builddir(), "config.h")) as f:
            cfg = f.read()
    except OSError:
        cfg = ""
    if "#define HAVE_NCCL 1" not in cfg:
        return "librdzvworker built without CUDA+NCCL"
    if not any(os.path.exists("/dev/nvidia%d" % i) for i in range(64)):
        return "no GPU on this machine (no /dev/nvidia*): NCCL path built, not run"
    return None


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 1
    return max(1, sum(1 for l in out.splitlines() if l.startswith("GPU ")))


def test_nccl_dp_step():
    """dp_check over the nccl backend (host buffers staged on the device),
    as many ranks as GPUs (NCCL wants one device per rank), at most 4."""
    why = gpu_skip_reason()
    if why:
        rt.skip(why)
    check = os.path.join(rt.top_builddir(), "tests", "integ", "dp_check")
    n = min(4, gpu_count())
    res = wl.run_ok(n, [check], timeout=180, store="tcpstore",
                    env={"RDZV_BACKEND": "nccl"})
    assert all("dp_check ok" in r[1] for r in res), res


def test_cuda_example():
    """ddp_mlp on the GPU: over nccl with one rank per GPU, and two ranks
    sharing GPU memory through the cpu backend; the loss curve matches the
    CPU run's (float sums in another order: looser tolerance), and so does
    the test accuracy, scored by the CUDA kernels in batches of 1000 (a
    launch that covered 128 rows of every 256 once halved it)."""
    why = gpu_skip_reason()
    if why:
        rt.skip(why)
    cpu = epochs(run(1, SMALL + ["--epochs", "2", "--batch", "60", "--cpu"]))
    n = min(2, gpu_count())
    out = run(n, SMALL + ["--epochs", "2", "--batch", str(60 // n),
                          "--cuda"], env={"RDZV_BACKEND": "auto"})
    assert "backend nccl model cuda" in out, out
    got = epochs(out)
    assert len(got) == 2 and all(abs(g[1] - c[1]) <= 1e-3 * c[1] and
                                 abs(g[3] - c[3]) <= 0.01
                                 for g, c in zip(got, cpu)), (got, cpu)
    out = run(2, SMALL + ["--epochs", "2", "--batch", "30", "--cuda"],
              env={"RDZV_BACKEND": "cpu"})
    assert "backend cpu model cuda" in out, out
    got = epochs(out)
    assert len(got) == 2 and all(abs(g[1] - c[1]) <= 1e-3 * c[1] and
                                 abs(g[3] - c[3]) <= 0.01
                                 for g, c in zip(got, cpu)), (got, cpu)


def test_bad_input():
    p = subprocess.run([prog(), "--batch", "0"], capture_output=True,
                       text=True, env=wl.base_env(), timeout=30)
    assert p.returncode == 2 and "--batch" in p.stderr, p
    p = subprocess.run([prog(), "--lr", "abc"], capture_output=True,
                       text=True, env=wl.base_env(), timeout=30)
    assert p.returncode == 2 and "--lr" in p.stderr, p
    d = rt.mktemp()
    p = subprocess.run([prog(), "--data", d], capture_output=True,
                       text=True, env=wl.base_env(), timeout=30)
    assert p.returncode == 1 and d in p.stderr, p
    # A corrupt checkpoint is an error, never a silent fresh start.
    ck = os.path.join(d, "ck.bin")
    with open(ck, "wb") as f:
        f.write(b"RDZVCKPT" + b"\0" * 100)
    p = subprocess.run([prog(), "--checkpoint", ck] + SMALL,
                       capture_output=True, text=True, env=wl.base_env(),
                       timeout=60)
    assert p.returncode == 1 and "rdzv_ckpt_load" in p.stderr, p


if __name__ == "__main__":
    if not os.path.exists(prog()):
        rt.skip_all("examples/ddp_mlp not built (needs OpenBLAS and zlib)")
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        rt.skip_all("no %s (apt-get install dataset-fashion-mnist)" % DATA)
    rt.main(globals(), per_test=200.0, total=600.0)
