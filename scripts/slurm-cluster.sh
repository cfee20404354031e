#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# slurm-cluster.sh: a real Slurm cluster on this one machine, to run rdzv
# under slurmctld and slurmd as users do.
#
#   scripts/slurm-cluster.sh up [--dir DIR] [--nodes N] [--bindir DIR]
#   scripts/slurm-cluster.sh down [--dir DIR]
#
# up starts munged (a key of its own), slurmctld and N slurmd "nodes"
# n1..nN (default 3), then prints the shell lines that point Slurm's
# commands at it.  Debian's Slurm is built with multiple-slurmd support, so
# every node is a slurmd of its own (slurmd -N nK) with its own port and
# spool, in its own UTS namespace (hostname nK).  The whole cluster lives in
# a network namespace made here, whose loopback alone carries its traffic:
# nK is 127.0.1.K there, slurmctld is 127.0.0.1, and a job's ports (29400
# for a torchrun script) meet nothing outside.  A mount namespace of the
# cluster's own gives /etc/hosts those names (and /etc/nsswitch.conf no
# DNS).  DIR/shared stands in for the
# shared filesystem; DIR/bin holds the Slurm commands (entering the
# namespaces) and rdzv's programs, and is on every job's PATH when the
# submitting shell has it on its own (sbatch exports the environment).
#
# Needs root (namespaces; slurmd starts jobs as their user) and Debian's
# slurmctld, slurmd, slurm-client and munge (scripts/deps.sh).  down
# cancels every job, stops the daemons and ends every process left in the
# cluster's network namespace (only ever processes this script's cluster
# started), then removes what up made in DIR (DIR/shared too).  Exit
# status 0, or 1 with the reason on stderr.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
dir=${RDZV_SLURM_DIR:-/tmp/rdzv-slurm}
nodes=3
bindir=

die() {
	echo "slurm-cluster.sh: $*" >&2
	exit 1
}

usage() {
	cat <<EOF
usage: $0 up [--dir DIR] [--nodes N] [--bindir DIR]
       $0 down [--dir DIR]

  --dir DIR     the cluster's files (default \$RDZV_SLURM_DIR or
                /tmp/rdzv-slurm): config, logs, spool, DIR/shared
  --nodes N     slurmd nodes n1..nN (2 to 9, default 3)
  --bindir DIR  where rdzvd, rdzv-agent and rdzvctl are (a build
                directory or an install's bin; default: ./build if
                built there, else PATH)
EOF
}

[ $# -ge 1 ] || { usage >&2; exit 2; }
cmd=$1
shift
while [ $# -gt 0 ]; do
	case $1 in
	--dir) dir=$2; shift 2 ;;
	--nodes) nodes=$2; shift 2 ;;
	--bindir) bindir=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
case $nodes in [2-9]) ;; *) die "--nodes $nodes: give 2 to 9" ;; esac
dir=$(mkdir -p "$dir" && cd "$dir" && pwd) || die "cannot make $dir"

conf=$dir/etc/slurm.conf
holder_pid() { cat "$dir/run/ns.pid" 2>/dev/null; }

# in_ns CMD...: CMD in the cluster's network and mount namespaces.
in_ns() {
	nsenter --target "$(holder_pid)" --net --mount -- "$@"
}

# ns_pids: every process in the cluster's network namespace but the
# holder, by pid.
ns_pids() {
	local h ns p
	h=$(holder_pid) || return 0
	ns=$(readlink "/proc/$h/ns/net" 2>/dev/null) || return 0
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		[ "$p" = "$h" ] && continue
		[ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "$ns" ] &&
			echo "$p"
	done
}

down() {
	local h i pids
	h=$(holder_pid)
	if [ -n "$h" ] && kill -0 "$h" 2>/dev/null; then
		# Jobs first, so that slurmstepd ends its tasks itself.
		SLURM_CONF=$conf timeout 10 nsenter --target "$h" --net \
			--mount -- scancel --quiet \
			--user="$(id -un)" >/dev/null 2>&1
		for i in $(seq 1 50); do
			[ -z "$(SLURM_CONF=$conf timeout 5 nsenter --target \
			    "$h" --net --mount -- squeue -h -o %i 2>/dev/null)" ] &&
				break
			sleep 0.2
		done
		for f in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid"; do
			[ -s "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
		done
		for i in $(seq 1 50); do
			pids=$(ns_pids)
			[ -z "$pids" ] && break
			[ "$i" -eq 25 ] && kill -KILL $pids 2>/dev/null
			sleep 0.2
		done
		pids=$(ns_pids)
		# shellcheck disable=SC2086
		[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
		kill -KILL "$h" 2>/dev/null
	fi
	if [ -S "$dir/munge/munge.socket" ]; then
		munged --socket="$dir/munge/munge.socket" --stop >/dev/null 2>&1
	fi
	# What up made, no more: DIR may have been given.
	rm -rf "$dir"/{etc,run,log,spool,ctld,munge,bin,shared}
	rmdir "$dir" 2>/dev/null
}

if [ "$cmd" = down ]; then
	down
	exit 0
fi
[ "$cmd" = up ] || { usage >&2; exit 2; }

# ---- up ----
[ "$(id -u)" -eq 0 ] ||
	die "needs root: the cluster runs in namespaces of its own and slurmd starts each job as its user"
for p in slurmctld slurmd munged sbatch srun scontrol sacct nsenter unshare ip; do
	command -v "$p" >/dev/null ||
		die "$p not found: scripts/deps.sh installs slurmctld, slurmd, slurm-client and munge"
done
if [ -n "$(holder_pid)" ] && kill -0 "$(holder_pid)" 2>/dev/null; then
	die "a cluster already runs in $dir: $0 down --dir $dir first"
fi

# rdzv's programs: a build tree or an install.
if [ -z "$bindir" ] && [ -x "$top/build/rdzvd/rdzvd" ]; then
	bindir=$top/build
fi
progs=()
for p in rdzvd rdzv-agent rdzvctl; do
	f=
	if [ -n "$bindir" ]; then
		for c in "$bindir/$p" "$bindir/${p%-agent}/$p" \
		    "$bindir/agent/$p" "$bindir/client/$p"; do
			[ -x "$c" ] && [ -f "$c" ] && { f=$c; break; }
		done
	else
		f=$(command -v "$p")
	fi
	[ -n "$f" ] || die "$p not found (in ${bindir:-PATH}): build rdzv or pass --bindir"
	progs+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done

rm -rf "$dir"/{etc,run,log,spool,ctld,munge,bin}
mkdir -p "$dir"/{etc,run,log,ctld,munge,bin,shared} || die "cannot write $dir"
chmod 755 "$dir" "$dir/munge" "$dir/shared"

# munge: a key of the cluster's own, a socket of its own.
dd if=/dev/urandom of="$dir/etc/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$dir/etc/munge.key"
chmod 700 "$dir/etc"
munged --socket="$dir/munge/munge.socket" --key-file="$dir/etc/munge.key" \
	--log-file="$dir/log/munged.log" --pid-file="$dir/run/munged.pid" \
	--seed-file="$dir/run/munged.seed" ||
	die "munged did not start: see $dir/log/munged.log"
chmod 755 "$dir/etc"

# Names from that file only: a lookup of anything else fails at once
# rather than asking a DNS server the namespace cannot reach.
if [ -f /etc/nsswitch.conf ]; then
	sed 's/^hosts:.*/hosts: files/' /etc/nsswitch.conf \
		>"$dir/etc/nsswitch.conf" || die "cannot read /etc/nsswitch.conf"
fi
{
	echo "127.0.0.1 localhost ctl"
	for i in $(seq 1 "$nodes"); do echo "127.0.1.$i n$i"; done
} >"$dir/etc/hosts"

cat >"$conf" <<EOF
# Made by scripts/slurm-cluster.sh: a cluster of one machine.
ClusterName=rdzv
SlurmctldHost=ctl(127.0.0.1)
SlurmctldPort=6817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# Processes by parentage: rdzv's workers lead process groups of their own.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# sacct --completion reads this: COMPLETED, FAILED, ... per job.
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SchedulerType=sched/builtin
# Pending jobs (a requeued one past its BeginTime) looked at every second.
SchedulerParameters=sched_interval=1
SelectType=select/linear
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
SlurmctldTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=600
MailProg=/bin/true
JobRequeue=1
SlurmdParameters=config_overrides
EOF
for i in $(seq 1 "$nodes"); do
	echo "NodeName=n$i NodeAddr=127.0.1.$i Port=$((6817 + i)) CPUs=2 State=UNKNOWN" >>"$conf"
done
echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$conf"

# The Slurm commands, entering the cluster's namespaces (unless already
# inside: a job's own srun), and rdzv's programs.
for p in sbatch srun salloc squeue sinfo scontrol scancel sacct sattach sstat; do
	cat >"$dir/bin/$p" <<EOF
#!/bin/sh
export SLURM_CONF=$conf
h=\$(cat $dir/run/ns.pid) || exit 1
if [ "\$(readlink /proc/\$h/ns/net)" = "\$(readlink /proc/self/ns/net)" ]; then
	exec /usr/bin/$p "\$@"
fi
exec nsenter --target "\$h" --net --mount --wd="\$PWD" -- /usr/bin/$p "\$@"
EOF
	chmod 755 "$dir/bin/$p"
done
for f in "${progs[@]}"; do ln -sf "$f" "$dir/bin/"; done

# The namespaces' holder: a sleeping process whose namespaces the daemons
# enter; down ends it last.
setsid unshare --net --mount --propagation slave -- sh -c '
	ip link set lo up || exit 1
	# The node addresses, on lo: also what getaddrinfo with AI_ADDRCONFIG,
	# with which the daemons bind, needs to see IPv4 configured.
	i=1
	while [ $i -le "$2" ]; do
		ip addr add 127.0.1.$i/32 dev lo || exit 1
		i=$((i + 1))
	done
	mount --bind "$1/etc/hosts" /etc/hosts || exit 1
	if [ -f "$1/etc/nsswitch.conf" ]; then
		mount --bind "$1/etc/nsswitch.conf" /etc/nsswitch.conf || exit 1
	fi
	echo $$ >"$1/run/ns.pid.tmp" && mv "$1/run/ns.pid.tmp" "$1/run/ns.pid"
	exec sleep infinity' sh "$dir" "$nodes" </dev/null >"$dir/log/holder.log" 2>&1 &
for _ in $(seq 1 100); do
	[ -s "$dir/run/ns.pid" ] && break
	kill -0 $! 2>/dev/null || break
	sleep 0.1
done
[ -s "$dir/run/ns.pid" ] || {
	down
	die "cannot make the cluster's namespaces: $(cat "$dir/log/holder.log" 2>/dev/null)"
}

export SLURM_CONF=$conf
in_ns unshare --uts -- sh -c 'hostname ctl && exec slurmctld -f "$1"' \
	sh "$conf" >>"$dir/log/start.log" 2>&1 || {
	cat "$dir/log/slurmctld.log" >&2; down; die "slurmctld did not start"; }
for i in $(seq 1 "$nodes"); do
	mkdir -p "$dir/spool/n$i"
	in_ns unshare --uts -- sh -c 'hostname "$2" && exec slurmd -f "$1" -N "$2"' \
		sh "$conf" "n$i" >>"$dir/log/start.log" 2>&1 || {
		cat "$dir/log/slurmd-n$i.log" >&2; down; die "slurmd n$i did not start"; }
done

# Ready when every node is idle.
ok=0
SECONDS=0
while [ $SECONDS -lt 30 ]; do
	idle=$(in_ns timeout 5 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
	[ "$idle" -eq "$nodes" ] && { ok=1; break; }
	sleep 0.2
done
if [ $ok -ne 1 ]; then
	in_ns sinfo -N >&2
	tail -5 "$dir"/log/slurm*.log >&2
	down
	die "the nodes did not come up idle in 30 s"
fi

cat <<EOF
# A Slurm cluster of $nodes nodes (n1..n$nodes) runs; to use it:
export PATH=$dir/bin:\$PATH SLURM_CONF=$conf
cd $dir/shared    # the shared directory every node sees
# sinfo; sbatch --nodes=2 $top/examples/slurm/rdzv.sbatch ...
# stop it with: $0 down --dir $dir
EOF
