# SPDX-License-Identifier: Apache-2.0
"""Every listener holds a connection storm (issue #9).

At job start every agent and worker connects at once.  A listener whose
accept queue is short drops the SYNs beyond it, and each dropped SYN costs
its client a retransmit a second or more later.  So for each listener
(rdzvd's main port, its HTTP port, a round's TCPStore port, the agent's
embedded rdzvd and its round port, librdzvworker's hosted TCPStore):

  - `ss -ltn` must show the system's full backlog (net.core.somaxconn);
  - with the owning process stopped (SIGSTOP, so nothing is accepted), a
    burst of BURST clients that connect and send their first request at
    once must all complete their handshakes with no TcpExtListenOverflows;
  - once the process continues, every one of them gets its answer (ADDs on
    one key return each of 1..BURST exactly once).

A control listener with libevent's old default backlog (128) must overflow
under the same burst, so the counter is shown to see what it should.

Out of descriptors (prlimit lowers the limit of the running process),
rdzvd and the hosted TCPStore must pause accepting rather than spin on a
listener that stays readable, and accept again once descriptors are free.

The file re-executes itself inside its own network namespace (unshare
--net) so the overflow counter counts only its bursts; other tests of a
parallel `make check` cannot move it.  Without permission for that it skips.
"""
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

import rdzvtest as rt
import agent_lib
import worker_lib

BURST = 2500
NETNS_ENV = "RDZV_STORM_NETNS"
OP_JOIN, OP_ROUND = 21, 26
FIELDS_STORE_PORT = 11          # store_port's index in a ROUND push


def enter_netns():
    """Re-executes this file under unshare --net, or skips the file."""
    if os.environ.get(NETNS_ENV) == "1":
        r = subprocess.run(["ip", "link", "set", "lo", "up"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            rt.skip_all("ip link set lo up: %s" % r.stderr.strip())
        return
    try:
        r = subprocess.run(["unshare", "--net", "true"], capture_output=True,
                           text=True, timeout=30)
        ok = r.returncode == 0
        why = r.stderr.strip()
    except (OSError, subprocess.SubprocessError) as e:
        ok, why = False, str(e)
    if not ok:
        rt.skip_all("no network namespace of our own (unshare --net: %s); "
                    "a storm could not be told apart from other tests" % why)
    os.environ[NETNS_ENV] = "1"
    sys.stdout.flush()
    os.execvp("unshare", ["unshare", "--net", "--", sys.executable,
                          os.path.abspath(__file__)] + sys.argv[1:])


def listen_overflows():
    """TcpExtListenOverflows of this network namespace."""
    with open("/proc/net/netstat") as f:
        lines = [l.split() for l in f if l.startswith("TcpExt:")]
    names, values = lines[0], lines[1]
    return int(values[names.index("ListenOverflows")])


def somaxconn():
    with open("/proc/sys/net/core/somaxconn") as f:
        return int(f.read())


def listeners(pid):
    """{port: backlog} of pid's TCP listening sockets, from ss -ltnp."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True,
                         check=True).stdout
    found = {}
    for line in out.splitlines():
        if "pid=%d," % pid not in line:
            continue
        f = line.split()
        # State Recv-Q Send-Q Local Peer Process; Send-Q is the backlog.
        port = int(f[3].rsplit(":", 1)[1])
        found[port] = int(f[2])
    return found


def burst(port, request, n=BURST, settle=3.0):
    """n non-blocking clients connect to port at once and each sends
    request.  Returns (sockets whose handshake completed, all sockets,
    ListenOverflows during the burst)."""
    before = listen_overflows()
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    # On loopback a handshake the queue has room for completes at once;
    # a dropped SYN leaves its socket unwritable until a retransmit (1 s
    # or more later, and dropped again while the server is stopped).
    pending = {s.fileno(): s for s in socks}
    done = []
    p = select.poll()
    for fd in pending:
        p.register(fd, select.POLLOUT)
    end = time.monotonic() + settle
    while pending and time.monotonic() < end:
        for fd, ev in p.poll(100):
            s = pending.pop(fd)
            p.unregister(fd)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                s.sendall(request)
                done.append(s)
    return done, socks, listen_overflows() - before


def read_replies(socks, size, timeout=60.0):
    """Reads size bytes from each socket (or to EOF if size is None)."""
    bufs = {s.fileno(): b"" for s in socks}
    byfd = {s.fileno(): s for s in socks}
    p = select.poll()
    for fd in bufs:
        p.register(fd, select.POLLIN)
    open_fds = set(bufs)
    end = time.monotonic() + timeout
    while open_fds and time.monotonic() < end:
        for fd, ev in p.poll(200):
            data = byfd[fd].recv(65536)
            bufs[fd] += data
            if not data or (size is not None and len(bufs[fd]) >= size):
                open_fds.discard(fd)
                p.unregister(fd)
    assert not open_fds, "%d of %d clients got no reply in %.0f s" % (
        len(open_fds), len(socks), timeout)
    return [bufs[s.fileno()] for s in socks]


def storm(pid, port, kind):
    """Stops pid, bursts port, continues pid, checks every answer."""
    key = b"storm/%d" % port
    if kind == "http":
        req = b"GET /healthz HTTP/1.0\r\n\r\n"
    else:
        req = rt.enc113("add", key, 1)
    os.kill(pid, signal.SIGSTOP)
    try:
        done, socks, overflows = burst(port, req)
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        assert overflows == 0, "port %d (%s): %d listen overflows in a " \
            "burst of %d" % (port, kind, overflows, BURST)
        assert len(done) == BURST, "port %d (%s): %d of %d handshakes " \
            "completed" % (port, kind, len(done), BURST)
        if kind == "http":
            for r in read_replies(done, None):
                assert r.startswith(b"HTTP/1.") and b" 200 " in \
                    r.split(b"\r\n", 1)[0], r[:80]
        else:
            got = sorted(struct.unpack("<q", r[:8])[0]
                         for r in read_replies(done, 8))
            assert got == list(range(1, BURST + 1)), \
                "port %d: ADD answers are not 1..%d" % (port, BURST)
    finally:
        for s in socks:
            s.close()


def check_process(pid, kinds, only=None):
    """pid's listeners show the full backlog, then each (or each in only)
    holds a storm.  kinds maps a port to "http"; any other port speaks
    TCPStore."""
    ls = rt.wait_until(lambda: listeners(pid), 10, what="listeners")
    want = somaxconn()
    for port, backlog in sorted(ls.items()):
        assert backlog == want, "pid %d port %d: backlog %d, the system " \
            "allows %d" % (pid, port, backlog, want)
    for port in sorted(ls):
        if only is None or port in only:
            storm(pid, port, kinds.get(port, "tcpstore"))
    return ls


def test_control_short_backlog_overflows():
    # The check can fail: a queue of 128 overflows under the same burst.
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(128)
    done, socks, overflows = burst(ls.getsockname()[1], b"x", settle=1.5)
    for s in socks:
        s.close()
    ls.close()
    assert overflows > 0 and len(done) < BURST, (overflows, len(done))


def test_rdzvd_main_http_and_round_ports():
    d = rt.Rdzvd()
    # A one-node job forms its round at once and opens the round's port.
    c = d.native()
    c.call(OP_JOIN, "storm", os.urandom(8).hex(), "host", "127.0.0.1",
           os.getpid(), 1, 1, 1, 0, 50, 60000)
    f = c.next_push(10.0)
    assert f.op == OP_ROUND, f
    round_port = f.fields[FIELDS_STORE_PORT]
    assert round_port > 0
    ls = check_process(d.pid, {d.http_port: "http"})
    assert set(ls) == {d.port, d.http_port, round_port}, ls
    assert d.running()
    # Accepted sockets inherit SO_KEEPALIVE (and TCP_NODELAY) from the
    # listener rather than setting them one by one: ss shows the timer.
    for port in (d.port, round_port):
        t = rt.TCPStore113(rt.connect("127.0.0.1", port))
        assert t.add(b"/keepalive", 1) == 1
        out = subprocess.run(["ss", "-HtnoO", "state", "established",
                              "( sport = :%d )" % port],
                             capture_output=True, text=True).stdout
        assert "keepalive" in out, (port, out)
        t.close()


def test_agent_embedded_rdzvd():
    tmp = rt.mktemp()
    w = agent_lib.write_worker(tmp)
    a = agent_lib.Agent(["--standalone", "--nproc_per_node", "1",
                         "--rdzv_conf", agent_lib.conf(lease=120), w, tmp],
                        tmp)
    try:
        agent_lib.wait_starts(tmp, lambda s: len(s) == 1)
        # Its embedded rdzvd's port and the round's port.
        rt.wait_until(lambda: len(listeners(a.pid)) == 2, 20,
                      what="two listeners")
        check_process(a.pid, {})
        assert a.alive(), a.output()[-2000:]
    finally:
        a.kill()


def start_hosting_rank0():
    """A librdzvworker rank 0 of a world of 2 that hosts the TCPStore and
    waits there for a rank 1 who never comes; returns (process, the
    store's port, its log path) once the store listens."""
    port = rt.free_port()
    env = worker_lib.base_env({"RANK": "0", "WORLD_SIZE": "2",
                               "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                               "MASTER_ADDR": "127.0.0.1",
                               "MASTER_PORT": str(port),
                               "WORKER_CHECK_TIMEOUT_MS": "120000"})
    log = os.path.join(rt.mktemp(), "rank0.log")
    with open(log, "wb") as out:
        p = subprocess.Popen([worker_lib.prog(), "init"], env=env,
                             stdout=out, stderr=subprocess.STDOUT)
    rt._track(p)
    try:
        rt.wait_until(lambda: port in listeners(p.pid), 20,
                      what="the hosted store")
    except BaseException:
        p.kill()
        p.wait()
        rt._untrack(p)
        raise
    return p, port, log


def test_worker_hosted_tcpstore():
    p, port, log = start_hosting_rank0()
    try:
        # The store's port (the CPU backend's listens too, but speaks no
        # TCPStore).
        ls = check_process(p.pid, {}, only=(port,))
        assert port in ls, ls
        assert p.poll() is None, open(log).read()[-2000:]
    finally:
        p.kill()
        p.wait()
        rt._untrack(p)


def cpu_seconds(pid):
    """User + system CPU time of every thread of pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backs_off_out_of_descriptors(pid, port):
    """Lowers pid's descriptor limit to what it holds plus a few, fills
    them with clients, and checks that it then idles (a listener left in
    its poll set would wake it at once, forever) and accepts again once
    descriptors are free."""
    held = len(os.listdir("/proc/%d/fd" % pid))
    nofile = held + 16
    subprocess.run(["prlimit", "--pid", str(pid),
                    "--nofile=%d:%d" % (nofile, nofile)], check=True)
    socks = []
    try:
        for _ in range(2 * (nofile - held)):
            s = rt.connect("127.0.0.1", port)
            s.sendall(rt.enc113("add", b"/emfile", 1))
            socks.append(s)
        # The ones it could accept are answered; then it is out.
        byfd = {s.fileno(): s for s in socks}
        answered = set()
        end = time.monotonic() + 3
        while time.monotonic() < end:
            r, _, _ = select.select(list(set(byfd) - answered), [], [], 0.2)
            for fd in r:
                assert len(byfd[fd].recv(8)) == 8
                answered.add(fd)
        assert 0 < len(answered) < len(socks), len(answered)
        t0 = cpu_seconds(pid)
        time.sleep(3)
        used = cpu_seconds(pid) - t0
        assert used < 0.2, "out of descriptors, pid %d used %.2f s of CPU " \
            "in 3 s: it spins on its listener" % (pid, used)
        for s in socks:
            s.close()
        socks = []
        # Descriptors free again: it accepts within its pause.
        t = rt.TCPStore113(rt.connect("127.0.0.1", port, timeout=30))
        assert t.add(b"/after", 1) == 1
        t.close()
    finally:
        for s in socks:
            s.close()


def test_rdzvd_backs_off_out_of_descriptors():
    d = rt.Rdzvd()
    backs_off_out_of_descriptors(d.pid, d.port)
    assert d.running()
    assert d.metric("rdzvd_errors_total", kind="accept") > 0
    assert "pausing accepts for 1 s" in d.log_text(), d.log_text()[-2000:]


def test_worker_store_backs_off_out_of_descriptors():
    p, port, log = start_hosting_rank0()
    try:
        backs_off_out_of_descriptors(p.pid, port)
        assert p.poll() is None, open(log).read()[-2000:]
    finally:
        p.kill()
        p.wait()
        rt._untrack(p)


if __name__ == "__main__":
    enter_netns()
    rt.main(globals(), per_test=120, total=420)
