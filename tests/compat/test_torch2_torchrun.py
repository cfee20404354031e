# SPDX-License-Identifier: Apache-2.0
"""test_torch2_torchrun: unmodified torchrun 2.13 with its c10d rendezvous
on rdzvd.

The job of test_torchrun.py (two agents, --nnodes 2 --nproc_per_node 2
--rdzv_backend c10d --rdzv_endpoint 127.0.0.1:<rdzvd> --rdzv_conf
is_host=false, gloo workers that allreduce) under torchrun 2.13, then what
torch 2.x does differently with a long-lived store:

  - the rendezvous state /torch.rendezvous.<JOB> lives in rdzvd; the
    workers' store does not: the group-rank-0 agent of torch 2.5+ hosts a
    TCPStore of its own for its workers (TORCHELASTIC_USE_AGENT_STORE=True,
    MASTER_PORT not rdzvd's) and publishes its address under
    torch.rendezvous.<JOB>.<round>/MASTER_ADDR|MASTER_PORT;
  - the state is closed when the job ends, and rdzvd keeps it (torch's own
    store dies with its agent): running the job again with the same
    --rdzv_id fails at once in every agent with RendezvousClosedError, as
    it does on torch's etcd backend;
  - once the job's keys are deleted (what doc/rdzvd.md tells users to do,
    here through the 2.x DELETE_KEY) the same id runs again, from round 0.
"""

import base64
import datetime
import pickle

import rdzvtest
import compatlib as cl
from compatlib import check, log

dist = cl.use_torch2()

import test_torchrun as tr  # noqa: E402  (needs the torch above)

SRV = None
JOB = "T2JOB"


def rdzv_state(c, job):
    blob = c.get("torch.rendezvous." + job)
    return pickle.loads(base64.b64decode(blob))


def test_job_runs_to_the_end():
    tr.run_job(SRV.port, JOB, python=cl.TORCH2_PY)
    c = dist.TCPStore("127.0.0.1", SRV.port, None, False,
        datetime.timedelta(seconds=10))
    st = rdzv_state(c, JOB)
    check(st.round == 0 and st.complete and st.closed,
        "state: round %r complete %r closed %r" % (st.round, st.complete,
        st.closed))
    check(sorted(st.participants.values()) == [0, 1],
        "participants %r" % st.participants)
    pfx = "torch.rendezvous.%s.0/" % JOB
    c.wait([pfx + "MASTER_ADDR", pfx + "MASTER_PORT",
        pfx + "torchelastic/role_info/0", pfx + "torchelastic/role_info/1"],
        datetime.timedelta(seconds=2))
    port = int(c.get(pfx + "MASTER_PORT"))
    check(port != SRV.port, "workers' store is rdzvd's port %d; torch "
        "2.13's rank-0 agent should host its own" % port)
    del c
    log("workers used the rank-0 agent's store on port %d" % port)


@rdzvtest.needs("test_job_runs_to_the_end")
def test_same_id_again_is_closed():
    dt, logs = tr.run_job(SRV.port, JOB, python=cl.TORCH2_PY, expect_rc=1)
    for a, t in enumerate(logs):
        check("RendezvousClosedError" in t, "agent %d of the re-run did "
            "not fail on the closed rendezvous:\n%s" % (a, t[-2000:]))
    log("re-run of %s: both agents failed on the closed state in %.1f s"
        % (JOB, dt))


@rdzvtest.needs("test_job_runs_to_the_end")
def test_same_id_after_deleting_its_keys():
    c = rdzvtest.TCPStore2(SRV.d.connect())
    pfx = b"/torch.rendezvous." + JOB.encode()
    mine = [k for k in c.list_keys() if k == pfx or
        k.startswith(pfx + b".")]
    check(len(mine) > 3, "keys of %s: %r" % (JOB, mine))
    for k in mine:
        check(c.delete_key(k) == 1, "DELETE_KEY %r" % k)
    c.close()
    tr.run_job(SRV.port, JOB, python=cl.TORCH2_PY)
    c = dist.TCPStore("127.0.0.1", SRV.port, None, False,
        datetime.timedelta(seconds=10))
    st = rdzv_state(c, JOB)
    check(st.round == 0 and st.closed, "state after the re-run: round %r "
        "closed %r" % (st.round, st.closed))
    del c


if __name__ == "__main__":
    SRV = cl.make_server(durability="relaxed")
    if SRV.kind != "rdzvd":
        rdzvtest.skip_all("the closed state is about rdzvd keeping it")
    rdzvtest.main(globals(), per_test=tr.JOB_TIMEOUT + 30, total=400,
        sections=True, server=SRV)
