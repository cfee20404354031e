#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu-check.sh: rdzv's GPU path in one command, on a machine with one or
# more NVIDIA GPUs and nothing to install (also runs where there is no
# GPU: its CPU-side checks then run and its GPU checks SKIP, saying why).
#
#   scripts/gpu-check.sh [--cpu-only | --fake-gpu] [BUILD]
#       BUILD: a configured build directory (default ./build; built with
#       make if its programs are missing).  Prints one line per check,
#       "CHECK <name> PASS|FAIL|SKIP <detail>", then a summary; exits 1
#       if any check FAILed.  Logs: $OUT/gpu-check/ when $OUT is set,
#       else BUILD/gpu-check/.  --cpu-only: the GPU checks SKIP.
#       --fake-gpu: the GPU checks run against the build's stand-in
#       libcudart+libnccl (tests/integ/fakegpu.c), which proves the script
#       and its programs run and parse, nothing about a GPU: its figures
#       mean nothing.
#   scripts/gpu-check.sh --bundle [BUILD [DEST]]
#       here, for a GPU machine that cannot build: copies into DEST
#       (default ./build-gpucheck, about 60 MiB) what the checks run, laid
#       out as in BUILD (the programs, rdzv-agent, librdzvworker, the stand-in
#       libraries), the shared libraries they need that a bare CUDA image
#       may lack (libevent, libbsd, OpenSSL, OpenBLAS, ...; used there only
#       where missing) and a Fashion-MNIST subset (6000 + 2000 samples).
#       Carry DEST and run "scripts/gpu-check.sh build-gpucheck" there.
#
# NCCL and the CUDA runtime are the GPU machine's own: librdzvworker loads
# them at run time; this script looks for libnccl.so.2 (ldconfig, CUDA,
# python packages) and says which one it used.  Budget: every step is
# capped, the whole run stops starting steps after GPUCHECK_BUDGET_S
# (default 420) seconds.
set -u

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cpu_only=0
bundle=0
fake=0
while [ $# -gt 0 ]; do
	case "$1" in
	--cpu-only) cpu_only=1 ;;
	--fake-gpu) fake=1 ;;
	--bundle) bundle=1 ;;
	-h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "gpu-check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
dest=${2:-$top/build-gpucheck}
B=$(cd "${1:-$top/build}" 2>/dev/null && pwd) || {
	echo "gpu-check.sh: no build directory ${1:-$top/build}: configure one (README) or name it" >&2
	exit 2
}
S=$(sed -n 's/^abs_top_srcdir = //p' "$B/Makefile" 2>/dev/null)
[ -d "$S" ] || S=$top
BUNDLE=$B/gpu-check-bundle
DATA_FULL=/usr/share/datasets/fashion-mnist

# ---------------------------------------------------------------- bundle

if [ $bundle -eq 1 ]; then
	set -e
	progs="tests/integ/gpu_fake_check tests/integ/worker_check bench/nccl_vs_rdzv examples/ddp_mlp agent/rdzv-agent"
	rm -rf "$dest"
	for x in $progs libworker/.libs/librdzvworker.so.0 tests/integ/.libs/libfakegpu.so config.h; do
		[ -e "$B/$x" ] || continue
		mkdir -p "$dest/$(dirname "$x")"
		cp -L "$B/$x" "$dest/$x"
	done
	ln -s librdzvworker.so.0 "$dest/libworker/.libs/librdzvworker.so"
	BUNDLE=$dest/gpu-check-bundle
	mkdir -p "$BUNDLE/lib" "$BUNDLE/data"
	for x in "$B/libworker/.libs/librdzvworker.so" "$B/examples/ddp_mlp" "$B/agent/rdzv-agent"; do
		[ -e "$x" ] || continue
		ldd "$x" | awk '$3 ~ /^\// {print $3}'
	done | sort -u | while read -r l; do
		case "$(basename "$l")" in
		libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s*|libstdc++*) ;;
		*librdzvworker*|*libcudart*|*libnccl*|*libcublas*) ;;
		*) cp -L "$l" "$BUNDLE/lib/" ;;
		esac
	done
	python3 - "$DATA_FULL" "$BUNDLE/data" <<-'EOF'
	import gzip, struct, sys
	src, dst = sys.argv[1], sys.argv[2]
	for name, n in (("train", 6000), ("t10k", 2000)):
	    for kind, dims in (("images-idx3-ubyte", 3), ("labels-idx1-ubyte", 1)):
	        raw = gzip.open("%s/%s-%s.gz" % (src, name, kind)).read()
	        hdr = 4 + 4 * dims
	        per = 1
	        for s in struct.unpack(">" + "I" * dims, raw[4:hdr])[1:]:
	            per *= s
	        out = raw[:4] + struct.pack(">I", n) + raw[8:hdr] + raw[hdr:hdr + n * per]
	        with gzip.open("%s/%s-%s.gz" % (dst, name, kind), "wb", 9) as f:
	            f.write(out)
	EOF
	du -sh "$dest"
	echo "gpu-check.sh: carry $dest; there: scripts/gpu-check.sh $(basename "$dest")"
	exit 0
fi

# ---------------------------------------------------------------- helpers

t_start=$(date +%s)
budget=${GPUCHECK_BUDGET_S:-420}
L=${OUT:+$OUT/gpu-check}
L=${L:-$B/gpu-check}
rm -rf "$L"
mkdir -p "$L"
npass=0 nfail=0 nskip=0

say() {	# say NAME PASS|FAIL|SKIP DETAIL
	echo "CHECK $1 $2 ${3:-}"
	echo "CHECK $1 $2 ${3:-}" >>"$L/summary.txt"
	case "$2" in
	PASS) npass=$((npass + 1)) ;;
	FAIL) nfail=$((nfail + 1)) ;;
	*) nskip=$((nskip + 1)) ;;
	esac
}

left() { echo $((budget - ($(date +%s) - t_start))); }

# t SECONDS LOG CMD...: CMD under a timeout the budget caps; 124 = late.
t() {
	local s=$1 log=$2 l
	shift 2
	l=$(left)
	[ "$l" -lt "$s" ] && s=$l
	if [ "$s" -lt 5 ]; then
		echo "(gpu-check: no time left in the budget)" >"$log"
		return 124
	fi
	timeout -k 5 "$s" "$@" >"$log" 2>&1
}

tail1() { tail -n "${2:-1}" "$1" 2>/dev/null | tr -s '\n\t' '  ' | cut -c1-300; }

# ranks N SECONDS LOGBASE CMD...: N ranks on 127.0.0.1 (rank 0 hosts the
# TCPStore), one GPU each (LOCAL_RANK); returns the first failure.
ranks() {
	local n=$1 s=$2 base=$3 r pids=() rc=0 x port=$((20000 + RANDOM % 30000))
	shift 3
	for ((r = 0; r < n; r++)); do
		RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n \
		    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RAW_ID_DIR=$L \
		    t "$s" "$base.$r.log" "$@" &
		pids+=($!)
	done
	for x in "${pids[@]}"; do
		wait "$x" || { r=$?; [ $rc -eq 0 ] && rc=$r; }
	done
	return $rc
}

# Epoch losses of a ddp_mlp log, space-separated.
losses() { sed -n 's/^epoch [0-9]* loss \([0-9.]*\).*/\1/p' "$1" | tr '\n' ' '; }

# The final test accuracy of a ddp_mlp log.
acc() { sed -n 's/^final test_acc \([0-9.]*\).*/\1/p' "$1"; }

# A ddp_mlp log's curve: "LOSS1 LOSS2 acc ACC".
curve() { echo "$(losses "$1")acc $(acc "$1")"; }

# near REF GOT LOSS_TOL ACC_TOL: whether the curve GOT has two epoch
# losses, each within LOSS_TOL (relative) of the curve REF's two, and a
# test accuracy within ACC_TOL of REF's (a missing one is never near).
near() {
	python3 - "$@" <<-'EOF'
	import sys
	def parse(a):
	    l, _, acc = a.partition("acc")
	    return [float(x) for x in l.split()], float(acc.strip() or "nan")
	(rl, ra), (gl, ga) = parse(sys.argv[1]), parse(sys.argv[2])
	lt, at = float(sys.argv[3]), float(sys.argv[4])
	sys.exit(not (len(rl) == 2 and len(gl) == 2 and abs(ga - ra) <= at and
	    all(abs(g - c) <= lt * c for g, c in zip(gl, rl))))
	EOF
}

# ---------------------------------------------------------------- build

P=$B/tests/integ/gpu_fake_check
if [ -f "$B/Makefile" ] && { [ ! -x "$P" ] || [ ! -x "$B/tests/integ/worker_check" ]; }; then
	t 400 "$L/build.log" make -C "$B" -j"$(nproc)" all \
	    tests/integ/gpu_fake_check tests/integ/worker_check
fi
if [ -x "$P" ]; then
	say build PASS "$B ($(grep -c '^#define HAVE_NCCL 1' "$B/config.h") nccl backend)"
else
	say build FAIL "no $P: $(tail1 "$L/build.log" 3)"
	echo "gpu-check: $npass pass, $nfail fail, $nskip skip"
	exit 1
fi

# A build made elsewhere: its own library first, the bundle's libraries
# where this machine has none.
fill=$L/libfill
mkdir -p "$fill"
if [ -d "$BUNDLE/lib" ]; then
	for x in "$BUNDLE"/lib/*; do
		ldconfig -p 2>/dev/null | grep -q "[[:space:]]$(basename "$x") " ||
		    ln -sf "$x" "$fill/"
	done
fi
export LD_LIBRARY_PATH=$B/libworker/.libs:$fill${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset RDZV_BACKEND RDZV_CUDART_LIBRARY RDZV_NCCL_LIBRARY
export RDZV_TIMEOUT_MS=60000

# ---------------------------------------------------------------- CPU side

miss=$(ldd "$P" "$B/tests/integ/worker_check" 2>&1 | grep 'not found' | sort -u | tr -s ' \t\n' ' ')
needed=$(readelf -d "$B/libworker/.libs/librdzvworker.so" 2>/dev/null | grep NEEDED | grep -E -o 'lib(nccl|cudart)[^]]*' | tr '\n' ' ')
t 30 "$L/cpu-nolibs.log" env RDZV_CUDART_LIBRARY=/nonexistent/libcudart.so \
    RDZV_NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$P" backend
if [ -n "$miss" ]; then
	say starts-without-gpu-libs FAIL "missing: $miss (gpu-check.sh --bundle where it was built)"
elif [ -n "$needed" ]; then
	say starts-without-gpu-libs FAIL "librdzvworker links $needed"
elif grep -q '^backend cpu' "$L/cpu-nolibs.log"; then
	say starts-without-gpu-libs PASS "no libcudart/libnccl needed; without them: $(grep '^backend' "$L/cpu-nolibs.log")"
else
	say starts-without-gpu-libs FAIL "$(tail1 "$L/cpu-nolibs.log" 2)"
fi

F=$B/tests/integ/.libs/libfakegpu.so
if [ -e "$F" ]; then
	fk() {	# fk NAME EXPECT ENV... -- ARGS...
		local name=$1 want=$2 e=()
		shift 2
		while [ "$1" != "--" ]; do e+=("$1"); shift; done
		shift
		t 60 "$L/fake-$name.log" env RDZV_CUDART_LIBRARY="$F" \
		    RDZV_NCCL_LIBRARY="$F" "${e[@]}" "$P" "$@"
		grep -q -- "$want" "$L/fake-$name.log" || echo "$name"
	}
	bad=$( {
		fk coll 'coll ok backend nccl' --  coll
		fk host 'allreduce returned -5' FAKE_NCCL_HANG=1 -- hang host 1500
		fk ihost 'wait returned -5' FAKE_NCCL_HANG=1 -- hang ihost 1500
		fk grow 'big allreduce returned -5' FAKE_NCCL_HANG=2 -- hang grow 1500
		fk abort 'finalized' FAKE_NCCL_HANG=1 -- hang abort 300
		fk reinit 'reinit ok 3' -- reinit 3
		fk order 'has the fill' -- order
	} | tr '\n' ' ')
	if [ -z "$bad" ]; then
		say fake-gpu-logic PASS "stand-in libcudart+libnccl: collectives, deadlines, abort, re-init, stream order"
	else
		say fake-gpu-logic FAIL "failed: $bad(logs $L/fake-*.log)"
	fi
else
	say fake-gpu-logic SKIP "no libfakegpu.so (built only with the CUDA and NCCL headers)"
fi

# ---------------------------------------------------------------- GPU side

ngpu=0
if [ $fake -eq 1 ]; then
	if [ -e "$F" ]; then
		ngpu=1
		export RDZV_CUDART_LIBRARY=$F RDZV_NCCL_LIBRARY=$F
	else
		why="--fake-gpu: no libfakegpu.so"
	fi
elif [ $cpu_only -eq 1 ]; then
	why="--cpu-only"
elif ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
	why="no GPU on this machine (no /dev/nvidia*)"
elif ! grep -q '^#define HAVE_NCCL 1' "$B/config.h"; then
	why="built without the NCCL headers (configure --with-nccl)"
else
	ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
	[ "$ngpu" -gt 0 ] || ngpu=$(ls /dev/nvidia[0-9]* | wc -l)
	nvidia-smi >"$L/nvidia-smi.log" 2>&1
fi
gpu_skip() { for n in "$@"; do say "$n" SKIP "$why"; done; }

find_nccl() {
	local d p
	p=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" {print $NF; exit}')
	[ -n "$p" ] && { echo "$p"; return; }
	for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /usr/local/lib; do
		[ -e "$d/libnccl.so.2" ] && { echo "$d/libnccl.so.2"; return; }
	done
	for py in python3 /opt/torch/.venv/bin/python3 "${TORCH2_PYTHON:-}"; do
		[ -n "$py" ] || continue
		p=$("$py" -c 'import nvidia.nccl, os, glob; print(glob.glob(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))[0])' 2>/dev/null) &&
		    [ -n "$p" ] && { echo "$p"; return; }
	done
	find /usr /opt -name libnccl.so.2 2>/dev/null | head -1
}

if [ "$ngpu" -eq 0 ]; then
	gpu_skip nccl-found nccl-bootstrap nccl-collectives nccl-overhead \
	    nccl-abort-reinit ddp_mlp-nccl agent-gpu torch-nccl-abort nccl-busbw \
	    nccl-peer-death
else
	if [ $fake -eq 1 ]; then
		say gpus PASS "FAKE: the stand-in libraries; every figure below is meaningless"
	else
		say gpus PASS "$ngpu: $(nvidia-smi -L 2>/dev/null | head -4 | cut -c1-60 | tr '\n' ';')"
	fi
	export RDZV_BACKEND=nccl
	# What the library finds on its own, then what this script found.
	t 60 "$L/nccl-own.log" "$P" backend
	if ! grep -q '^backend nccl' "$L/nccl-own.log"; then
		nccl=$(find_nccl)
		[ -n "$nccl" ] && export RDZV_NCCL_LIBRARY=$nccl
		t 60 "$L/nccl-found.log" "$P" backend
	else
		cp "$L/nccl-own.log" "$L/nccl-found.log"
	fi
	if grep -q '^backend nccl' "$L/nccl-found.log"; then
		say nccl-found PASS "$(grep -h -o 'nccl [0-9.]*: rank.*' "$L/nccl-found.log" | head -1); ${RDZV_NCCL_LIBRARY:-found by the library itself}"
	else
		say nccl-found FAIL "$(grep -h 'init failed' "$L/nccl-own.log" | cut -c1-300)"
	fi

	# One rank per GPU, at most 8, for the bootstrap and per-call times.
	nr=$((ngpu < 8 ? ngpu : 8))
	ranks $nr 90 "$L/boot" "$B/bench/nccl_vs_rdzv" boot
	r=$(grep -h '^RESULT boot' "$L/boot.0.log")
	[ -n "$r" ] && say nccl-bootstrap PASS "$nr rank(s), rank 0: ${r#RESULT boot }" ||
	    say nccl-bootstrap FAIL "$(tail1 "$L/boot.0.log" 2)"

	t 120 "$L/coll.log" "$P" coll
	grep -q '^coll ok backend nccl' "$L/coll.log" &&
	    say nccl-collectives PASS "every collective, host and device buffers, 1 rank" ||
	    say nccl-collectives FAIL "$(grep -h FAIL "$L/coll.log" | head -3 | tr '\n' ' ') $(tail1 "$L/coll.log")"

	ranks $nr 120 "$L/calls" "$B/bench/nccl_vs_rdzv" calls 100
	r=$(grep -h '^RESULT call' "$L/calls.0.log" | sed 's/^RESULT call //' | tr '\n' ';')
	[ -n "$r" ] && say nccl-overhead PASS "$nr rank(s), median per call, bytes raw/rdzv-dev/rdzv-host: $r" ||
	    say nccl-overhead FAIL "$(tail1 "$L/calls.0.log" 2)"

	t 120 "$L/reinit.log" "$P" reinit 3
	grep -q '^reinit ok 3' "$L/reinit.log" &&
	    say nccl-abort-reinit PASS "rdzv_abort from another thread, then a new communicator, 3 times: abort $(sed -n 's/^aborted in \([0-9.]*\) ms/\1/p' "$L/reinit.log" | tr '\n' ' ')ms, ready again in $(sed -n 's/.*ready in \([0-9.]*\) ms/\1/p' "$L/reinit.log" | tail -n +2 | tr '\n' ' ')ms" ||
	    say nccl-abort-reinit FAIL "$(tail1 "$L/reinit.log" 2)"

	D=$BUNDLE/data
	[ -e "$D/train-images-idx3-ubyte.gz" ] || D=$DATA_FULL
	M=$B/examples/ddp_mlp
	A=(--data "$D" --limit 6000 --hidden 32 --test-limit 2000 --lr 0.1 --threads 1 --epochs 2 --batch 60)
	if [ ! -x "$M" ]; then
		say ddp_mlp-nccl SKIP "no examples/ddp_mlp (built without OpenBLAS/zlib)"
	elif [ ! -e "$D/train-images-idx3-ubyte.gz" ]; then
		say ddp_mlp-nccl SKIP "no Fashion-MNIST at $D (gpu-check.sh --bundle where it was built)"
	else
		t 120 "$L/mlp-cpu.log" env RDZV_BACKEND=cpu "$M" "${A[@]}" --cpu
		t 120 "$L/mlp-nccl.log" "$M" "${A[@]}" --cpu
		cuda=""
		if ! readelf -d "$M" 2>/dev/null | grep -q libcublas; then
			cuda="not built (no cuBLAS headers)"
		elif [ $fake -eq 1 ]; then
			cuda="not run (--fake-gpu)"
		elif t 120 "$L/mlp-cuda.log" "$M" "${A[@]}" --cuda; then
			cuda=$(curve "$L/mlp-cuda.log")
		else
			cuda="failed: $(tail1 "$L/mlp-cuda.log" 2)"
		fi
		# Losses and test accuracy: the CUDA path's own kernels score
		# the test set in batches of 1000, larger than a training step.
		ref=$(curve "$L/mlp-cpu.log")
		got=$(curve "$L/mlp-nccl.log")
		verdict=FAIL
		near "$ref" "$got" 1e-4 0 && case "$cuda" in
		failed*) ;;
		[0-9]*) near "$ref" "$cuda" 1e-3 0.01 && verdict=PASS ;;
		*) verdict=PASS ;;
		esac
		say ddp_mlp-nccl $verdict "losses, test accuracy: cpu backend $ref, nccl backend $got, mlp_cuda on nccl $cuda"
		# The whole system on the GPUs: rdzv-agent (its in-process
		# rdzvd) starts one worker per GPU it counts; each bootstraps
		# NCCL from the rendezvous and trains on CUDA where built so.
		G=$B/agent/rdzv-agent
		how=--cpu
		case "$cuda" in [0-9]*) how=--cuda ;; esac
		if [ ! -x "$G" ]; then
			say agent-gpu SKIP "no agent/rdzv-agent in $B"
		# --nproc_per_node gpu: one worker per GPU, all of them (nr
		# stops at 8).
		elif np=gpu nw=$ngpu; [ $fake -eq 1 ] && np=$nr nw=$nr
		    t 180 "$L/agent.log" "$G" --standalone --nproc_per_node $np \
		    --no_python "$M" "${A[@]}" "$how" &&
		    grep -q "world $nw backend nccl" "$L/agent.log"; then
			sed -n 's/^\[default0\]://p' "$L/agent.log" >"$L/agent.0.log"
			# One worker is the one-process run above; more are a
			# larger global batch, another curve.
			if [ "$nw" -eq 1 ]; then
				near "$ref" "$(curve "$L/agent.0.log")" 1e-3 0.01
			else
				[ "$(losses "$L/agent.0.log" | wc -w)" -eq 2 ]
			fi && verdict=PASS || verdict=FAIL
			say agent-gpu $verdict "rdzv-agent --nproc_per_node $np: $(grep -o 'world .* backend nccl model [a-z]*' "$L/agent.log" | head -1), losses $(curve "$L/agent.0.log") (one process: $ref)"
		else
			say agent-gpu FAIL "$(tail1 "$L/agent.log" 3)"
		fi
	fi

	py=""
	for x in /opt/torch/.venv/bin/python3 "${TORCH2_PYTHON:-}" python3; do
		[ -n "$x" ] && "$x" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null && { py=$x; break; }
	done
	if [ $fake -eq 1 ]; then
		say torch-nccl-abort SKIP "--fake-gpu: torch uses its own NCCL"
	elif [ -z "$py" ]; then
		say torch-nccl-abort SKIP "no python with torch and CUDA here"
	else
		(unset RDZV_BACKEND; t 150 "$L/torch.log" "$py" - "$S/python" <<-'EOF'
		# The helper's NCCL abort (python/rdzv/repair.py Job._abort, as its
		# watcher calls it) on a real one-rank NCCL group, then re-init.
		import datetime, os, sys, threading, time
		sys.path.insert(0, sys.argv[1])
		os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
		os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
		import torch, torch.distributed as dist
		from rdzv import repair
		class Chan:
		    def send(self, *a): pass
		torch.cuda.set_device(0)
		st = dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=30))
		dist.init_process_group("nccl", store=dist.PrefixStore("a/", st), rank=0, world_size=1)
		x = torch.ones(1 << 20, device="cuda")
		dist.all_reduce(x); torch.cuda.synchronize()
		job = repair.Job("nccl", None, Chan()); job._joined = True
		t0 = time.monotonic()
		th = threading.Thread(target=job._abort); th.start(); th.join(30)
		print("abort took %.1f ms, alive %s, default group kept %s" % ((time.monotonic() - t0) * 1e3, th.is_alive(), dist.is_initialized()))
		try:
		    dist.all_reduce(x); torch.cuda.synchronize(); after = "returned silently"
		except Exception as e:
		    after = "raised %s: %s" % (type(e).__name__, str(e).splitlines()[0][:80])
		print("all_reduce after abort " + after)
		try:
		    dist.destroy_process_group()
		except Exception as e:
		    print("destroy: %s" % e)
		dist.init_process_group("nccl", store=dist.PrefixStore("b/", st), rank=0, world_size=1)
		x = torch.full((1 << 20,), 2.0, device="cuda")
		dist.all_reduce(x); torch.cuda.synchronize()
		print("RESULT torch ok re-init works (%s), torch %s nccl %s" % (x[0].item() == 2.0, torch.__version__, torch.cuda.nccl.version()))
		dist.destroy_process_group()
		EOF
		)
		if grep -q '^RESULT torch ok' "$L/torch.log" && grep -q 'default group kept True' "$L/torch.log"; then
			say torch-nccl-abort PASS "$(grep -h -E '^(abort took|all_reduce after)' "$L/torch.log" | tr '\n' ';') $(grep -h '^RESULT' "$L/torch.log" | cut -c15-)"
		else
			say torch-nccl-abort FAIL "$(tail1 "$L/torch.log" 3)"
		fi
	fi

	if [ "$ngpu" -lt 2 ]; then
		why="one GPU: needs 2 (NCCL's several-ranks-per-GPU mode not tried)"
		gpu_skip nccl-busbw nccl-peer-death
	else
		ranks 2 120 "$L/busbw" "$B/bench/nccl_vs_rdzv" busbw $((256 << 20))
		r=$(grep -h '^RESULT busbw' "$L/busbw.0.log" | tail -2 | sed 's/^RESULT busbw //' | tr '\n' ';')
		[ -n "$r" ] && say nccl-busbw PASS "2 ranks, bytes raw/rdzv GB/s: $r" ||
		    say nccl-busbw FAIL "$(tail1 "$L/busbw.0.log" 2)"
		# A real peer death: rank 1 is killed mid-loop; rank 0 must
		# see it and come out (exit 3, "broken"), never hang.
		port=$((20000 + RANDOM % 30000))
		for r in 0 1; do
			RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
			    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
			    WORKER_CHECK_TIMEOUT_MS=10000 timeout -k 5 90 \
			    "$B/tests/integ/worker_check" loop 60000 1048576 \
			    >"$L/death.$r.log" 2>&1 &
			eval "pid$r=$!"
		done
		for _ in $(seq 600); do
			grep -q looping "$L/death.1.log" 2>/dev/null && break
			sleep 0.1
		done
		sleep 1
		t0=$(date +%s.%N)
		pkill -KILL -P "$pid1" 2>/dev/null; kill -KILL "$pid1" 2>/dev/null
		wait "$pid0"; rc0=$?
		wait "$pid1" 2>/dev/null
		took=$(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null)
		if [ "$rc0" -eq 3 ] && grep -q '^broken' "$L/death.0.log"; then
			say nccl-peer-death PASS "survivor out in ${took:-?} s: $(grep -h '^broken' "$L/death.0.log" | cut -c1-120)"
		else
			say nccl-peer-death FAIL "survivor exit $rc0: $(tail1 "$L/death.0.log" 2)"
		fi
	fi
fi

echo "gpu-check: $npass pass, $nfail fail, $nskip skip in $(( $(date +%s) - t_start )) s; logs in $L"
[ $nfail -eq 0 ]
