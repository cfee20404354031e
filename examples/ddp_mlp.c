/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ddp_mlp.c: data-parallel training of an MLP on Fashion-MNIST with
 * librdzvworker, the way a C program would use it under rdzv-agent,
 * torchrun (--no_python), mpirun or srun.
 *
 *	ddp_mlp --epochs N --batch B --lr LR --hidden H --data DIR
 *	    --checkpoint PATH
 *
 * B is the batch per rank, so the global batch is B times the world
 * size.  The distributed sampler hands rank r entries r, r + size, ... of
 * one shuffled order, and each rank scales its gradient by 1/B before the
 * all-reduce averages it: a step over the global batch is the same
 * computation whatever the world size, up to floating-point rounding, and
 * so is the loss curve.  Rank 0 prints progress lines during an epoch and
 * one line per epoch:
 *
 *	epoch 1 loss 0.6102 train_acc 0.7893 test_acc 0.8123 samples/s 51234 time 1.17s
 *
 * With --checkpoint the state is saved at the end of every epoch (and
 * every --checkpoint-every steps), and a restarted job resumes from it,
 * mid-epoch included, reaching the same result as an uninterrupted run.
 *
 * Under rdzv-agent it repairs in place (rdzv_options.repair; RDZV_REPAIR=0
 * turns it off): when a rank dies, the call that notices returns
 * RDZV_EREPAIR, the step is dropped, the communicator is rebuilt on the
 * agent's round, the parameters and the position in the epoch are taken
 * from the round's donor (rdzv_dp_sync), the sampler reshards the rest
 * of the epoch over the new world, and training goes on; a replacement
 * started by the agent joins the same way.  With --print-hash every rank
 * prints at the end
 *
 *	params rank R hash H
 *
 * (a hash of its parameters: equal on every rank, repaired or not).
 * With --until FILE (for tests) training goes on past --epochs, an epoch
 * at a time, until FILE exists: the ranks agree on it at each epoch's end
 * (in the epoch's sums), so a test decides when the job may end instead
 * of guessing how long it lasts.
 * When its node leaves on purpose (SIGTERM to its agent), each of its
 * ranks finishes the step in flight and exits 0, printing
 *
 *	rank R leaves at a step boundary at epoch E sample S
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "rdzv_worker.h"
#include "idx.h"
#include "mlp.h"

#define EVAL_BATCH	1000
#define NCLASSES	10

struct args {
	int		 epochs;
	int		 batch;
	float		 lr;
	int		 hidden;
	const char	*data;
	const char	*checkpoint;
	int		 ckpt_every;	/* steps; 0: at epoch ends only */
	uint64_t	 seed;
	long		 limit;		/* training samples used; 0: all */
	long		 test_limit;
	size_t		 bucket_kb;
	int		 threads;
	int		 cuda;		/* -1 auto, 0 no, 1 required */
	int		 exit_after;	/* testing resume: stop after N steps */
	int		 crash_rank;	/* with exit_after: only it, by SIGKILL */
	int		 print_hash;	/* every rank prints its parameters' hash */
	const char	*until;		/* testing: train on until this exists */
};

/* What a checkpoint holds besides the parameters. */
struct meta {
	uint64_t	epoch;		/* 0-based epoch in progress */
	uint64_t	done;		/* global samples done in that epoch */
	uint64_t	global_batch;
	uint64_t	seed;
	uint64_t	hidden;
	double		loss_sum;	/* over the epoch so far, all ranks */
	double		seen;
	double		correct;
};

struct train {
	struct args	 a;
	struct rdzv_comm *comm;
	int		 rank, size;
	struct idx_set	 tr, te;
	struct mlp	 m;
	float		*host;		/* parameters on the host: init, ckpt */
	struct rdzv_dp_param dpp[4];
	struct rdzv_dp	*dp;
	struct rdzv_sampler *smp;
	uint8_t		*xb, *yb;
	/* This epoch's running sums on this rank (rank 0 also carries
	 * whatever a checkpoint restored). */
	double		 loss_sum, seen, correct;
	/* Where training stands: what rdzv_dp_sync hands a joiner. */
	struct pos {
		uint64_t	epoch;	/* 0-based epoch in progress */
		uint64_t	done;	/* global samples done in it */
		uint64_t	held;	/* 1: --until's file not seen yet */
	}		 pos;
};

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr,
	    "usage: ddp_mlp [--epochs N] [--batch B] [--lr LR] [--hidden H]\n"
	    "               [--data DIR] [--checkpoint PATH] "
	    "[--checkpoint-every STEPS]\n"
	    "               [--seed S] [--limit N] [--test-limit N] "
	    "[--bucket-kb K]\n"
	    "               [--threads T] [--cpu | --cuda]\n"
	    "  testing: [--exit-after STEPS [--crash-rank R]] "
	    "[--print-hash] [--until FILE]\n");
	exit(2);
}

static double
now_s(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
}

static long
arg_long(const char *s, long lo, long hi, const char *what)
{
	char	*end;
	long	 v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *s == '\0' || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "ddp_mlp: %s: %s: want %ld..%ld\n", what, s,
		    lo, hi);
		exit(2);
	}
	return (v);
}

static void
parse_args(struct args *a, int argc, char **argv)
{
	static const struct option	opts[] = {
		{ "epochs", required_argument, NULL, 'e' },
		{ "batch", required_argument, NULL, 'b' },
		{ "lr", required_argument, NULL, 'l' },
		{ "hidden", required_argument, NULL, 'H' },
		{ "data", required_argument, NULL, 'd' },
		{ "checkpoint", required_argument, NULL, 'c' },
		{ "checkpoint-every", required_argument, NULL, 'C' },
		{ "seed", required_argument, NULL, 's' },
		{ "limit", required_argument, NULL, 'n' },
		{ "test-limit", required_argument, NULL, 't' },
		{ "bucket-kb", required_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 'T' },
		{ "cpu", no_argument, NULL, 'P' },
		{ "cuda", no_argument, NULL, 'G' },
		{ "exit-after", required_argument, NULL, 'X' },
		{ "crash-rank", required_argument, NULL, 'K' },
		{ "print-hash", no_argument, NULL, 'p' },
		{ "until", required_argument, NULL, 'U' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	char	*end;
	int	 ch;

	memset(a, 0, sizeof *a);
	a->epochs = 5;
	a->batch = 64;
	a->lr = 0.1f;
	a->hidden = 128;
	a->data = "/usr/share/datasets/fashion-mnist";
	a->seed = 1;
	a->cuda = -1;
	a->crash_rank = -1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'e':
			a->epochs = (int)arg_long(optarg, 1, 100000, "--epochs");
			break;
		case 'b':
			a->batch = (int)arg_long(optarg, 1, 1 << 20, "--batch");
			break;
		case 'l':
			errno = 0;
			a->lr = strtof(optarg, &end);
			if (errno != 0 || *end != '\0' || !(a->lr > 0.0f) ||
			    !isfinite(a->lr)) {
				fprintf(stderr, "ddp_mlp: --lr: %s\n", optarg);
				exit(2);
			}
			break;
		case 'H':
			a->hidden = (int)arg_long(optarg, 1, 1 << 16, "--hidden");
			break;
		case 'd':
			a->data = optarg;
			break;
		case 'c':
			a->checkpoint = optarg;
			break;
		case 'C':
			a->ckpt_every = (int)arg_long(optarg, 0, INT_MAX,
			    "--checkpoint-every");
			break;
		case 's':
			a->seed = (uint64_t)arg_long(optarg, 0, LONG_MAX,
			    "--seed");
			break;
		case 'n':
			a->limit = arg_long(optarg, 0, LONG_MAX, "--limit");
			break;
		case 't':
			a->test_limit = arg_long(optarg, 0, LONG_MAX,
			    "--test-limit");
			break;
		case 'k':
			a->bucket_kb = (size_t)arg_long(optarg, 1, 1 << 22,
			    "--bucket-kb");
			break;
		case 'T':
			a->threads = (int)arg_long(optarg, 1, 1024, "--threads");
			break;
		case 'P':
			a->cuda = 0;
			break;
		case 'G':
			a->cuda = 1;
			break;
		case 'X':
			a->exit_after = (int)arg_long(optarg, 1, INT_MAX,
			    "--exit-after");
			break;
		case 'K':
			a->crash_rank = (int)arg_long(optarg, 0, INT_MAX,
			    "--crash-rank");
			break;
		case 'p':
			a->print_hash = 1;
			break;
		case 'U':
			a->until = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
}

/* Prints on rank 0 only; everything else stays quiet. */
static void __attribute__((format(printf, 2, 3)))
say(const struct train *t, const char *fmt, ...)
{
	va_list	ap;

	if (t->rank != 0)
		return;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

/*
 * This node leaves the job on purpose (its agent was asked to: SIGTERM):
 * at a step boundary, with every step it took part in finished.  Every
 * rank prints where it leaves, so the others' position after their
 * shrink can be checked against it.
 */
static void __attribute__((noreturn))
leave(struct train *t, const char *how)
{
	printf("rank %d leaves %s at epoch %llu sample %llu\n", t->rank, how,
	    (unsigned long long)t->pos.epoch + 1,
	    (unsigned long long)t->pos.done);
	fflush(stdout);
	rdzv_finalize(t->comm);
	exit(0);
}

/* Reports a library failure with its code and the communicator's words. */
static void __attribute__((noreturn))
die(struct train *t, const char *what, int rc)
{
	/* A peer of this node left first and broke the step: leave too. */
	if (t->comm != NULL && rdzv_leave_requested(t->comm))
		leave(t, "with its step cut by a peer leaving");
	fprintf(stderr, "ddp_mlp: rank %d: %s: %s%s%s\n", t->rank, what,
	    rdzv_strerror(rc), t->comm != NULL && *rdzv_comm_errmsg(t->comm) ?
	    ": " : "", t->comm != NULL ? rdzv_comm_errmsg(t->comm) : "");
	/* Finalizing closes our connections, so peers fail fast too. */
	if (t->comm != NULL)
		rdzv_finalize(t->comm);
	exit(1);
}

/* Backward tells us which parameters' gradients are final. */
static int
grad_ready_cb(size_t off, size_t n, void *arg)
{
	struct train	*t = arg;
	size_t		 i;
	int		 rc;

	/* Parameters in reverse order, the order buckets are cut in. */
	for (i = 4; i-- > 0;) {
		size_t	po = (size_t)((float *)t->dpp[i].grad - t->m.grads);

		if (po >= off && po < off + n &&
		    (rc = rdzv_dp_grad_ready(t->dp, i)) != 0)
			return (rc);
	}
	return (0);
}

static int
mlp_pick_cuda(struct train *t)
{
#ifdef HAVE_CUDA_EXAMPLE
	/* The model on the library's device (nccl), else local rank's. */
	int	dev = rdzv_device(t->comm) >= 0 ? rdzv_device(t->comm) :
		    rdzv_local_rank(t->comm);

	if (t->a.cuda != 0 && mlp_cuda_available(dev))
		return (1);
#endif
	if (t->a.cuda == 1) {
		fprintf(stderr, "ddp_mlp: --cuda: no usable CUDA device%s\n",
#ifdef HAVE_CUDA_EXAMPLE
		    ""
#else
		    " (built without CUDA)"
#endif
		    );
		exit(1);
	}
	return (0);
}

static void
setup(struct train *t)
{
	const struct mlp_ops	*ops = &mlp_cpu_ops;
	struct rdzv_options	 o;
	char			 err[512];
	size_t			 maxb;
	int			 rc;

	/*
	 * The data first: a replacement tells the agent it is ready from
	 * rdzv_init, and the survivors wait for nothing after that.
	 */
	if (idx_load(&t->tr, t->a.data, "train", err, sizeof err) != 0 ||
	    idx_load(&t->te, t->a.data, "t10k", err, sizeof err) != 0) {
		fprintf(stderr, "ddp_mlp: %s\n", err);
		exit(1);
	}
	if (t->a.limit > 0 && (size_t)t->a.limit < t->tr.n)
		t->tr.n = (size_t)t->a.limit;
	if (t->a.test_limit > 0 && (size_t)t->a.test_limit < t->te.n)
		t->te.n = (size_t)t->a.test_limit;

	rdzv_options_init(&o);
	o.repair = 1;		/* every failure below handles RDZV_EREPAIR */
	if ((rc = rdzv_init(&t->comm, &o, err, sizeof err)) != 0) {
		fprintf(stderr, "ddp_mlp: rdzv_init: %s\n", err);
		exit(1);
	}
	t->rank = rdzv_rank(t->comm);
	t->size = rdzv_size(t->comm);

	/* Share the cores between the ranks of this host, unless told. */
	if (t->a.threads == 0 && getenv("OPENBLAS_NUM_THREADS") == NULL &&
	    getenv("OMP_NUM_THREADS") == NULL) {
		long	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		int	ls = rdzv_local_size(t->comm);

		t->a.threads = (int)(ncpu / (ls > 0 ? ls : 1));
		if (t->a.threads < 1)
			t->a.threads = 1;
	}
	if (t->a.threads > 0)
		openblas_set_num_threads(t->a.threads);


#ifdef HAVE_CUDA_EXAMPLE
	if (mlp_pick_cuda(t))
		ops = &mlp_cuda_ops;
#else
	(void)mlp_pick_cuda(t);
#endif
	maxb = (size_t)t->a.batch > EVAL_BATCH ? (size_t)t->a.batch :
	    EVAL_BATCH;
	if (mlp_new(&t->m, ops, t->tr.rows * t->tr.cols, (size_t)t->a.hidden,
	    NCLASSES, maxb) != 0) {
		fprintf(stderr, "ddp_mlp: cannot set up the %s model\n",
		    ops->name);
		rdzv_finalize(t->comm);
		exit(1);
	}
	if ((t->host = calloc(t->m.nparams, sizeof (float))) == NULL ||
	    (t->xb = malloc(maxb * t->m.in)) == NULL ||
	    (t->yb = malloc(maxb)) == NULL)
		die(t, "setup", RDZV_ENOMEM);

	t->dpp[0] = (struct rdzv_dp_param){ t->m.params + t->m.off_w1,
	    t->m.grads + t->m.off_w1, t->m.hidden * t->m.in, RDZV_F32 };
	t->dpp[1] = (struct rdzv_dp_param){ t->m.params + t->m.off_b1,
	    t->m.grads + t->m.off_b1, t->m.hidden, RDZV_F32 };
	t->dpp[2] = (struct rdzv_dp_param){ t->m.params + t->m.off_w2,
	    t->m.grads + t->m.off_w2, t->m.out * t->m.hidden, RDZV_F32 };
	t->dpp[3] = (struct rdzv_dp_param){ t->m.params + t->m.off_b2,
	    t->m.grads + t->m.off_b2, t->m.out, RDZV_F32 };
	if ((rc = rdzv_dp_new(t->comm, t->dpp, 4, t->a.bucket_kb * 1024,
	    &t->dp)) != 0)
		die(t, "rdzv_dp_new", rc);
	if ((rc = rdzv_sampler_new(t->tr.n, t->rank, t->size, t->a.seed,
	    RDZV_SAMPLER_SHUFFLE, &t->smp)) != 0)
		die(t, "rdzv_sampler_new", rc);
	say(t, "ddp_mlp: world %d backend %s model %s hidden %d batch %d "
	    "(global %d) lr %g train %zu test %zu\n", t->size,
	    rdzv_backend(t->comm) == RDZV_BACKEND_NCCL ? "nccl" : "cpu",
	    ops->name, t->a.hidden, t->a.batch, t->a.batch * t->size,
	    (double)t->a.lr, t->tr.n, t->te.n);
}

/*
 * Saves the parameters and where we are.  The running sums are made
 * global first, and kept on rank 0 only, so they stay right whether or
 * not the job is restarted from this file.
 */
static int
save(struct train *t, uint64_t epoch, uint64_t done)
{
	struct rdzv_ckpt_part	parts[2];
	struct meta		meta;
	double			sums[3] = { t->loss_sum, t->seen, t->correct };
	int			rc;

	if ((rc = rdzv_allreduce(t->comm, sums, sums, 3, RDZV_F64, RDZV_SUM,
	    -1)) == RDZV_EREPAIR)
		return (rc);
	if (rc != 0)
		die(t, "allreduce (checkpoint sums)", rc);
	t->loss_sum = t->rank == 0 ? sums[0] : 0.0;
	t->seen = t->rank == 0 ? sums[1] : 0.0;
	t->correct = t->rank == 0 ? sums[2] : 0.0;
	memset(&meta, 0, sizeof meta);
	meta.epoch = epoch;
	meta.done = done;
	meta.global_batch = (uint64_t)t->a.batch * (uint64_t)t->size;
	meta.seed = t->a.seed;
	meta.hidden = (uint64_t)t->a.hidden;
	meta.loss_sum = sums[0];
	meta.seen = sums[1];
	meta.correct = sums[2];
	if (t->rank == 0 && t->m.ops->get_params(&t->m, t->host) != 0)
		die(t, "reading parameters", RDZV_EIO);
	parts[0].data = t->host;
	parts[0].len = t->m.nparams * sizeof (float);
	parts[1].data = &meta;
	parts[1].len = sizeof meta;
	if ((rc = rdzv_ckpt_save(t->comm, t->a.checkpoint, parts, 2,
	    epoch * 1000000000ULL + done, -1)) == RDZV_EREPAIR)
		return (rc);
	if (rc != 0)
		die(t, "rdzv_ckpt_save", rc);
	return (0);
}

/*
 * Takes the round donor's parameters and position (all ranks: at start,
 * after a repair, in a replacement) and shards the rest of the epoch over
 * this world.  Returns 0 or RDZV_EREPAIR.
 */
static int
sync_state(struct train *t)
{
	struct rdzv_ckpt_part	part = { &t->pos, sizeof t->pos };
	int			rc;

	if ((rc = rdzv_dp_sync(t->dp, &part, 1, NULL, -1)) == RDZV_EREPAIR)
		return (rc);
	if (rc != 0)
		die(t, "rdzv_dp_sync", rc);
	if ((rc = rdzv_sampler_set_epoch(t->smp, t->pos.epoch)) != 0 ||
	    (rc = rdzv_sampler_reshard(t->smp, t->rank, t->size,
	    t->pos.done)) != 0)
		die(t, "rdzv_sampler_reshard", rc);
	return (0);
}

/* A call returned RDZV_EREPAIR: rebuild on the agent's round and sync. */
static void
recover(struct train *t)
{
	struct rdzv_round	rd;
	int			rc;

	do {
		if (rdzv_leave_requested(t->comm))
			leave(t, "instead of repairing");
		if ((rc = rdzv_comm_repair(t->comm, -1)) != 0)
			die(t, "rdzv_comm_repair", rc);
		t->rank = rdzv_rank(t->comm);
		t->size = rdzv_size(t->comm);
	} while (sync_state(t) == RDZV_EREPAIR);
	(void)rdzv_comm_round(t->comm, &rd);
	say(t, "repaired: round %d (%s), world %d, epoch %llu at sample "
	    "%llu\n", rd.round, rd.kind == RDZV_ROUND_GROW ? "grow" : "shrink",
	    t->size, (unsigned long long)t->pos.epoch + 1,
	    (unsigned long long)t->pos.done);
}

/*
 * Fresh parameters, or the checkpoint's; then rank 0's are broadcast, as
 * DDP does, so every rank starts from the same ones.  Returns the epoch
 * and, through *done, the samples of it already trained.
 */
static uint64_t
restore(struct train *t, uint64_t *done)
{
	struct rdzv_ckpt_part	parts[2];
	struct meta		meta;
	uint64_t		step, gb;
	int			rc;

	*done = 0;
	mlp_init_params(&t->m, t->a.seed, t->host);
	memset(&meta, 0, sizeof meta);
	rc = RDZV_ENOTFOUND;
	if (t->a.checkpoint != NULL) {
		parts[0].data = t->host;
		parts[0].len = t->m.nparams * sizeof (float);
		parts[1].data = &meta;
		parts[1].len = sizeof meta;
		rc = rdzv_ckpt_load(t->comm, t->a.checkpoint, parts, 2, &step,
		    -1);
		if (rc != 0 && rc != RDZV_ENOTFOUND)
			die(t, "rdzv_ckpt_load", rc);
	}
	if (rc == 0 && (meta.hidden != (uint64_t)t->a.hidden ||
	    meta.seed != t->a.seed)) {
		fprintf(stderr, "ddp_mlp: %s: saved with other --hidden or "
		    "--seed\n", t->a.checkpoint);
		die(t, "checkpoint", RDZV_EINVAL);
	}
	if (t->m.ops->set_params(&t->m, t->host) != 0)
		die(t, "setting parameters", RDZV_EIO);
	if (meta.epoch == 0 && meta.done == 0 && meta.seen == 0.0)
		return (0);
	/* A new world size may change the global batch: whole steps only. */
	gb = (uint64_t)t->a.batch * (uint64_t)t->size;
	*done = meta.done / gb * gb;
	if (t->rank == 0) {
		t->loss_sum = meta.loss_sum;
		t->seen = meta.seen;
		t->correct = meta.correct;
	}
	say(t, "resumed from %s: epoch %llu, %llu samples done\n",
	    t->a.checkpoint, (unsigned long long)meta.epoch + 1,
	    (unsigned long long)*done);
	return (meta.epoch);
}

/* Test accuracy, the test set split over the ranks: 0 or RDZV_EREPAIR. */
static int
evaluate(struct train *t, double *acc)
{
	int64_t	c[2] = { 0, 0 };	/* right, total */
	size_t	i, k, b, right;
	int	rc;

	for (i = (size_t)t->rank; i < t->te.n; i += b * (size_t)t->size) {
		/* Rank r takes samples r, r + size, ... in slices. */
		for (b = 0; b < EVAL_BATCH; b++) {
			k = i + b * (size_t)t->size;
			if (k >= t->te.n)
				break;
			memcpy(t->xb + b * t->m.in, t->te.images + k * t->m.in,
			    t->m.in);
			t->yb[b] = t->te.labels[k];
		}
		if (b == 0)
			break;
		if (t->m.ops->eval(&t->m, t->xb, t->yb, b, &right) != 0)
			die(t, "eval", RDZV_EIO);
		c[0] += (int64_t)right;
		c[1] += (int64_t)b;
	}
	if ((rc = rdzv_allreduce(t->comm, c, c, 2, RDZV_I64, RDZV_SUM, -1)) ==
	    RDZV_EREPAIR)
		return (rc);
	if (rc != 0)
		die(t, "allreduce (accuracy)", rc);
	*acc = c[1] > 0 ? (double)c[0] / (double)c[1] : 0.0;
	return (0);
}

/*
 * Trains the rest of epoch t->pos.epoch from t->pos.done, then reports
 * it and moves t->pos to the next epoch.  Returns 0, or RDZV_EREPAIR
 * with the interrupted step dropped (t->pos still before it).
 */
static int
train_epoch(struct train *t, int *stepsp)
{
	uint64_t	count, i, lo, hi, steps, s, gb, k, epoch, s0;
	double		t0, dt, acc, loss, sums[4];
	size_t		right, b;
	float		scale;
	int		rc, rc2, quarter = 0;

	epoch = t->pos.epoch;
	if ((rc = rdzv_sampler_set_epoch(t->smp, epoch)) != 0 ||
	    (rc = rdzv_sampler_reshard(t->smp, t->rank, t->size,
	    t->pos.done)) != 0)
		die(t, "rdzv_sampler_reshard", rc);
	count = rdzv_sampler_count(t->smp);
	steps = (count + (uint64_t)t->a.batch - 1) / (uint64_t)t->a.batch;
	gb = (uint64_t)t->a.batch * (uint64_t)t->size;
	/* Whole-epoch step numbers, for the progress lines. */
	s0 = t->pos.done / gb;
	if (t->pos.done == 0)
		t->loss_sum = t->seen = t->correct = 0.0;
	t0 = now_s();
	for (s = 0; s < steps; s++) {
		lo = s * (uint64_t)t->a.batch;
		hi = lo + (uint64_t)t->a.batch < count ?
		    lo + (uint64_t)t->a.batch : count;
		b = (size_t)(hi - lo);
		for (i = 0; i < b; i++) {
			k = rdzv_sampler_index(t->smp, lo + i);
			memcpy(t->xb + i * t->m.in, t->tr.images + k * t->m.in,
			    t->m.in);
			t->yb[i] = t->tr.labels[k];
		}
		/* Each rank's batch has b samples (the sampler pads), so
		 * 1/b here and the average over ranks make 1/global. */
		scale = 1.0f / (float)b;
		rc = t->m.ops->step(&t->m, t->xb, t->yb, b, scale, &loss,
		    &right, grad_ready_cb, t);
		/* Always finished: it completes what the step started. */
		rc2 = rdzv_dp_finish(t->dp, -1);
		if (rc == RDZV_EREPAIR || rc2 == RDZV_EREPAIR)
			return (RDZV_EREPAIR);	/* the step is dropped */
		if (rc != 0)
			die(t, "training step", rc < 0 ? rc : RDZV_EIO);
		if (rc2 != 0)
			die(t, "rdzv_dp_finish", rc2);
		if (t->m.ops->sgd(&t->m, t->a.lr) != 0)
			die(t, "sgd", RDZV_EIO);
		t->loss_sum += loss;
		t->seen += (double)b;
		t->correct += (double)right;
		t->pos.done += (uint64_t)b * (uint64_t)t->size;
		(*stepsp)++;
		if (rdzv_leave_requested(t->comm))
			leave(t, "at a step boundary");

		if (t->a.checkpoint != NULL && t->a.ckpt_every > 0 &&
		    (s0 + s + 1) % (uint64_t)t->a.ckpt_every == 0 &&
		    s + 1 < steps &&
		    (rc = save(t, epoch, t->pos.done)) != 0)
			return (rc);
		/* Testing: a clean stop of every rank, or one rank's death. */
		if (t->a.exit_after > 0 && *stepsp == t->a.exit_after) {
			if (t->a.crash_rank == t->rank) {
				fprintf(stderr, "ddp_mlp: rank %d: SIGKILL to "
				    "myself after %d steps\n", t->rank, *stepsp);
				raise(SIGKILL);
			}
			if (t->a.crash_rank < 0) {
				say(t, "exiting after %d steps "
				    "(--exit-after)\n", *stepsp);
				rdzv_finalize(t->comm);
				exit(3);
			}
		}
		/* A progress line at each quarter, rank 0's view. */
		while (quarter < 3 && (s + 1) * 4 >= steps * (uint64_t)(quarter
		    + 1)) {
			quarter++;
			if (s + 1 < steps)
				say(t, "  epoch %llu %3d%% step %llu/%llu "
				    "loss %.4f samples/s %.0f\n",
				    (unsigned long long)epoch + 1, quarter * 25,
				    (unsigned long long)(s0 + s + 1),
				    (unsigned long long)(s0 + steps),
				    t->loss_sum / (t->seen > 0 ? t->seen : 1),
				    (double)((s + 1) * gb) / (now_s() - t0));
		}
	}
	/* The epoch's figures over all ranks. */
	sums[0] = t->loss_sum;
	sums[1] = t->seen;
	sums[2] = t->correct;
	/* --until: whether any rank saw the file, agreed with the sums. */
	sums[3] = t->a.until != NULL && access(t->a.until, F_OK) == 0;
	if ((rc = rdzv_allreduce(t->comm, sums, sums, 4, RDZV_F64, RDZV_SUM,
	    -1)) == RDZV_EREPAIR)
		return (rc);
	if (rc != 0)
		die(t, "allreduce (epoch sums)", rc);
	if (sums[3] > 0.0)
		t->pos.held = 0;
	dt = now_s() - t0;
	if ((rc = evaluate(t, &acc)) != 0)
		return (rc);
	if (t->a.checkpoint != NULL && (rc = save(t, epoch + 1, 0)) != 0)
		return (rc);
	say(t, "epoch %llu loss %.6f train_acc %.4f test_acc %.4f "
	    "samples/s %.0f time %.2fs\n", (unsigned long long)epoch + 1,
	    sums[1] > 0 ? sums[0] / sums[1] : 0.0,
	    sums[1] > 0 ? sums[2] / sums[1] : 0.0, acc,
	    (double)(steps * gb) / dt, dt);
	t->loss_sum = t->seen = t->correct = 0.0;
	t->pos.epoch = epoch + 1;
	t->pos.done = 0;
	return (0);
}

/* Prints a hash of this rank's parameters (FNV-1a over their bytes). */
static void
print_hash(struct train *t)
{
	const uint8_t	*p = (const uint8_t *)t->host;
	uint64_t	 h = 0xcbf29ce484222325ULL;
	size_t		 i;

	if (t->m.ops->get_params(&t->m, t->host) != 0)
		die(t, "reading parameters", RDZV_EIO);
	for (i = 0; i < t->m.nparams * sizeof (float); i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	printf("params rank %d hash %016llx\n", t->rank, (unsigned long long)h);
}

int
main(int argc, char **argv)
{
	struct train		t;
	struct rdzv_round	rd;
	double			acc = 0.0;
	int			steps = 0, rc;

	memset(&t, 0, sizeof t);
	parse_args(&t.a, argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	setup(&t);
	(void)rdzv_comm_round(t.comm, &rd);
	t.pos.held = t.a.until != NULL;
	/* A replacement takes everything from the donor; others load. */
	if (!rd.joined)
		t.pos.epoch = restore(&t, &t.pos.done);
	while (sync_state(&t) == RDZV_EREPAIR)
		recover(&t);
	for (;;) {
		rc = 0;
		while (rc == 0 && (t.pos.epoch < (uint64_t)t.a.epochs ||
		    t.pos.held))
			rc = train_epoch(&t, &steps);
		if (rc == 0 && (rc = evaluate(&t, &acc)) == 0)
			break;
		recover(&t);
	}
	say(&t, "final test_acc %.4f\n", acc);
	if (t.a.print_hash)
		print_hash(&t);
	rdzv_dp_free(t.dp);
	rdzv_sampler_free(t.smp);
	mlp_free(&t.m);
	idx_free(&t.tr);
	idx_free(&t.te);
	free(t.host);
	free(t.xb);
	free(t.yb);
	if ((rc = rdzv_finalize(t.comm)) != 0) {
		fprintf(stderr, "ddp_mlp: rdzv_finalize: %s\n",
		    rdzv_strerror(rc));
		return (1);
	}
	return (0);
}
