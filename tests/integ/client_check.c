/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_check.c: exercises every call of the native store client
 * (common/client.h) against a running rdzvd and checks each answer.
 *
 * usage: client_check HOST:PORT
 * With RDZV_TLS_CA set the connections to rdzvd use TLS (the fake
 * servers of the timeout checks stay plaintext).  Prints one line per
 * failed check and "client_check: N checks, M failed";
 * exits 0 only when every check passed.  Keys live in a namespace of
 * their own (client_check/<pid>), so it can run against a shared rdzvd.
 */
#include "config.h"

#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <sys/wait.h>

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "hostport.h"
#include "mono.h"
#include "rdzv_err.h"
#include "wire.h"

static int	checks, failed;

static struct rdzv_client	*connect_rdzvd(const char *, int *);

#define CHECK(cond) do {						\
	checks++;							\
	if (!(cond)) {							\
		failed++;						\
		printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);	\
	}								\
} while (0)

/* An int result that must be a given value, printed when it is not. */
#define CHECK_RV(expr, want) do {					\
	int	rv_ = (expr);						\
	checks++;							\
	if (rv_ != (want)) {						\
		failed++;						\
		printf("FAIL %s:%d: %s = %d (%s), want %d\n", __FILE__,	\
		    __LINE__, #expr, rv_, rdzv_strerror(rv_), (want));	\
	}								\
} while (0)

/* The value v (len bytes) a call returned: the string s; freed, v NULL. */
#define CHECK_VALUE(v, len, s) do {					\
	CHECK((v) != NULL && (len) == sizeof(s) - 1 &&			\
	    memcmp((v), (s), sizeof(s) - 1) == 0);			\
	free(v);							\
	(v) = NULL;							\
} while (0)

struct pushes {
	int	n;
	int	last_op;
};

static void
push_cb(uint16_t op, const uint8_t *payload, size_t len, void *arg)
{
	struct pushes	*p = arg;

	p->n++;
	p->last_op = op;
}

static void
check_addresses(const char *hp)
{
	struct rdzv_client	*c;
	char			 host[RDZV_HOST_MAX], buf[RDZV_HOSTPORT_MAX];
	int			 err, port;

	err = 0;
	CHECK(rdzv_client_connect("no-port", 1000, &err) == NULL);
	CHECK(err == RDZV_EINVAL);
	CHECK(rdzv_client_connect("::1:5", 1000, &err) == NULL);
	CHECK(err == RDZV_EINVAL);
	CHECK(rdzv_client_connect("127.0.0.1:0", 1000, &err) == NULL);
	CHECK(err == RDZV_EINVAL);
	CHECK(rdzv_client_connect("127.0.0.1:99999", 1000, &err) == NULL);
	CHECK(err == RDZV_EINVAL);
	CHECK(rdzv_client_connect("[::1:5", 1000, &err) == NULL);
	CHECK(err == RDZV_EINVAL);
	CHECK(rdzv_client_connect("no.such.host.invalid:5", 5000, &err) ==
	    NULL);
	CHECK(err == RDZV_ECONN);
	/* Port 9 (discard) is closed on a test machine: refused. */
	CHECK(rdzv_client_connect("127.0.0.1:9", 1000, &err) == NULL);
	CHECK(err == RDZV_ECONN);

	/* The same server by name ("localhost" may be IPv4 only). */
	if (hostport_split(hp, 0, host, sizeof host, &port, NULL, 0) != 0 ||
	    strcmp(host, "127.0.0.1") != 0)
		return;
	(void)hostport_join(buf, sizeof buf, "localhost", port);
	c = connect_rdzvd(buf, &err);
	CHECK(c != NULL);
	if (c != NULL)
		CHECK_RV(rdzv_client_ping(c, 5000), 0);
	rdzv_client_close(c);
}

/* A connection to rdzvd, over TLS when RDZV_TLS_CA names a CA. */
static struct rdzv_client *
connect_rdzvd(const char *hp, int *err)
{
	struct rdzv_client_opts	o;
	struct rdzv_client	*c;
	char			why[512];

	memset(&o, 0, sizeof o);
	o.tls_ca = getenv("RDZV_TLS_CA");
	o.why = why;
	o.whysz = sizeof why;
	if ((c = rdzv_client_connect_opts(hp, 5000, &o, err)) == NULL)
		printf("connect %s: %s\n", hp, why[0] ? why :
		    rdzv_strerror(*err));
	return (c);
}

/* A server that accepts but never answers: the preamble times out. */
static void
check_silent_server(void)
{
	struct sockaddr_storage	 ss;
	socklen_t		 sl = sizeof ss;
	struct rdzv_client	*c;
	char			 hp[64];
	double			 t;
	int			 lfd, err = 0;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(lfd != -1);
	{
		struct sockaddr_in	sin;

		memset(&sin, 0, sizeof sin);
		sin.sin_family = AF_INET;
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		CHECK(bind(lfd, (struct sockaddr *)&sin, sizeof sin) == 0);
		CHECK(listen(lfd, 4) == 0);
		CHECK(getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0);
		snprintf(hp, sizeof hp, "127.0.0.1:%u",
		    ntohs(((struct sockaddr_in *)&ss)->sin_port));
	}
	t = mono_ns() / 1e9;
	c = rdzv_client_connect(hp, 300, &err);
	t = mono_ns() / 1e9 - t;
	CHECK(c == NULL);
	CHECK(err == RDZV_ETIMEDOUT);
	CHECK(t >= 0.25 && t < 2);
	close(lfd);
}

/* Reads exactly n bytes or exits (the fake server child). */
static void
read_full(int fd, void *p, size_t n)
{
	ssize_t	r;
	size_t	got;

	for (got = 0; got < n; got += (size_t)r)
		if ((r = read(fd, (char *)p + got, n - got)) <= 0)
			_exit(3);
}

/* Reads one native frame into buf (at least 64 bytes); returns its id. */
static uint32_t
fake_read_frame(int fd, uint8_t *buf)
{
	uint32_t	len, id;

	read_full(fd, buf, 4);
	memcpy(&len, buf, 4);
	if (len < 8 || len > 60)
		_exit(4);
	read_full(fd, buf + 4, len);
	memcpy(&id, buf + 8, 4);
	return (id);
}

/* Writes a PING reply for id echoing data (4 bytes). */
static void
fake_ping_reply(int fd, uint32_t id, const char *data)
{
	uint8_t		f[12 + 1 + 4 + 4];
	uint32_t	v;
	uint16_t	op = NAT_OP_PING, flags = NAT_F_REPLY;

	v = sizeof f - 4;
	memcpy(f, &v, 4);
	memcpy(f + 4, &op, 2);
	memcpy(f + 6, &flags, 2);
	memcpy(f + 8, &id, 4);
	f[12] = NAT_T_BYTES;
	v = 4;
	memcpy(f + 13, &v, 4);
	memcpy(f + 17, data, 4);
	if (write(fd, f, sizeof f) != (ssize_t)sizeof f)
		_exit(5);
}

/*
 * A server that answers a request only after the client gave up on it:
 * the client must time out, stay usable, and skip the late reply (sent
 * with a wrong echo, so taking it for the next reply would show).
 */
static void
check_late_reply(void)
{
	struct sockaddr_in	 sin;
	socklen_t		 sl = sizeof sin;
	struct rdzv_client	*c;
	uint8_t			 buf[64];
	uint32_t		 id1, id2;
	char			 hp[64];
	pid_t			 pid;
	int			 lfd, fd, err = 0, status;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd == -1 || bind(lfd, (struct sockaddr *)&sin, sizeof sin) != 0 ||
	    listen(lfd, 4) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&sin, &sl) != 0) {
		CHECK(!"fake server socket");
		return;
	}
	snprintf(hp, sizeof hp, "127.0.0.1:%u", ntohs(sin.sin_port));
	if ((pid = fork()) == 0) {
		if ((fd = accept(lfd, NULL, NULL)) == -1)
			_exit(2);
		read_full(fd, buf, NAT_PREAMBLE_LEN);
		if (write(fd, buf, NAT_PREAMBLE_LEN) != NAT_PREAMBLE_LEN)
			_exit(5);
		id1 = fake_read_frame(fd, buf);
		id2 = fake_read_frame(fd, buf);
		fake_ping_reply(fd, id1, "zzzz");
		fake_ping_reply(fd, id2, "rdzv");
		read_full(fd, buf, 1);	/* until the client closes */
		_exit(0);
	}
	close(lfd);
	c = rdzv_client_connect(hp, 2000, &err);
	CHECK(c != NULL);
	if (c != NULL) {
		CHECK_RV(rdzv_client_ping(c, 200), RDZV_ETIMEDOUT);
		CHECK(rdzv_client_alive(c));
		CHECK_RV(rdzv_client_ping(c, 2000), 0);
		rdzv_client_close(c);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3);
}

int
main(int argc, char **argv)
{
	struct rdzv_client	*c, *c2;
	struct pushes		 pushes = { 0, 0 };
	const char		*keys[3], *vals[3];
	size_t			 lens[3], len, n, i;
	void			*gv[3], *v;
	char			 ns[64], **list;
	int64_t			 iv;
	double			 t;
	int			 err = 0, found;

	if (argc != 2) {
		fprintf(stderr, "usage: client_check HOST:PORT\n");
		return (2);
	}
	check_addresses(argv[1]);
	check_silent_server();
	check_late_reply();

	c = connect_rdzvd(argv[1], &err);
	if (c == NULL) {
		printf("FAIL connect %s: %s\n", argv[1], rdzv_strerror(err));
		return (1);
	}
	CHECK(rdzv_client_alive(c));
	CHECK(rdzv_client_fd(c) >= 0);
	snprintf(ns, sizeof ns, "client_check/%ld", (long)getpid());
	CHECK_RV(rdzv_client_set_namespace(c, ns), 0);
	CHECK_RV(rdzv_client_ping(c, 5000), 0);

	/* set / get, binary values with NULs */
	CHECK_RV(rdzv_client_set(c, "a", "x\0y", 3, 5000), 0);
	v = NULL;
	CHECK_RV(rdzv_client_get(c, "a", &v, &len, 5000), 0);
	CHECK(v != NULL && len == 3 && memcmp(v, "x\0y", 4) == 0);
	free(v);
	CHECK_RV(rdzv_client_set(c, "empty", "", 0, 5000), 0);
	v = NULL;
	CHECK_RV(rdzv_client_get(c, "empty", &v, &len, 5000), 0);
	CHECK(v != NULL && len == 0 && ((char *)v)[0] == '\0');
	free(v);
	CHECK_RV(rdzv_client_get(c, "missing", &v, &len, 5000),
	    RDZV_ENOTFOUND);
	CHECK(rdzv_client_alive(c));

	/* add */
	CHECK_RV(rdzv_client_add(c, "n", 5, &iv, 5000), 0);
	CHECK(iv == 5);
	CHECK_RV(rdzv_client_add(c, "n", -7, &iv, 5000), 0);
	CHECK(iv == -2);
	CHECK_RV(rdzv_client_add(c, "a", 1, &iv, 5000), RDZV_ENOTINT);
	CHECK(rdzv_client_errmsg(c)[0] != '\0');
	v = NULL;
	CHECK_RV(rdzv_client_get(c, "n", &v, &len, 5000), 0);
	CHECK_VALUE(v, len, "-2");

	/* cas with TCPStore's rules */
	v = NULL;
	CHECK_RV(rdzv_client_cas(c, "cas", "", 0, "one", 3, &v, &len, 5000), 0);
	CHECK_VALUE(v, len, "one");
	CHECK_RV(rdzv_client_cas(c, "cas", "nope", 4, "two", 3, &v, &len,
	    5000), 0);
	CHECK_VALUE(v, len, "one");
	CHECK_RV(rdzv_client_cas(c, "cas", "one", 3, "two", 3, NULL, NULL,
	    5000), 0);
	v = NULL;
	CHECK_RV(rdzv_client_get(c, "cas", &v, &len, 5000), 0);
	CHECK_VALUE(v, len, "two");
	CHECK_RV(rdzv_client_cas(c, "cas-missing", "x", 1, "y", 1, &v, &len,
	    5000), 0);
	CHECK_VALUE(v, len, "x");

	/* check / wait */
	keys[0] = "a";
	keys[1] = "n";
	keys[2] = "later";
	CHECK_RV(rdzv_client_check(c, keys, 2, 5000), 1);
	CHECK_RV(rdzv_client_check(c, keys, 3, 5000), 0);
	CHECK_RV(rdzv_client_wait(c, keys, 2, 5000), 0);
	t = mono_ns() / 1e9;
	CHECK_RV(rdzv_client_wait(c, keys, 3, 200), RDZV_ETIMEDOUT);
	t = mono_ns() / 1e9 - t;
	CHECK(t >= 0.15 && t < 2.1);
	CHECK(rdzv_client_alive(c));
	/* A second connection sets the key a first one waits for. */
	c2 = connect_rdzvd(argv[1], &err);
	CHECK(c2 != NULL);
	if (c2 != NULL) {
		CHECK_RV(rdzv_client_set_namespace(c2, ns), 0);
		CHECK_RV(rdzv_client_wait(c2, keys, 2, 0), 0);
		CHECK_RV(rdzv_client_wait(c2, keys, 3, 0), RDZV_ETIMEDOUT);
	}
	CHECK_RV(rdzv_client_set(c, "later", "1", 1, 5000), 0);
	if (c2 != NULL)
		CHECK_RV(rdzv_client_wait(c2, keys, 3, 5000), 0);

	/* delete, num_keys, append */
	CHECK_RV(rdzv_client_num_keys(c, &iv, 5000), 0);
	CHECK(iv == 5);	/* a, empty, n, cas, later */
	CHECK_RV(rdzv_client_delete(c, "later", 5000), 1);
	CHECK_RV(rdzv_client_delete(c, "later", 5000), 0);
	CHECK_RV(rdzv_client_append(c, "log", "ab", 2, 5000), 0);
	CHECK_RV(rdzv_client_append(c, "log", "cd", 2, 5000), 0);
	v = NULL;
	CHECK_RV(rdzv_client_get(c, "log", &v, &len, 5000), 0);
	CHECK_VALUE(v, len, "abcd");

	/* multi_set / multi_get */
	keys[0] = "m1";
	keys[1] = "m2";
	keys[2] = "m3";
	vals[0] = "v1";
	vals[1] = "";
	vals[2] = "v333";
	lens[0] = 2;
	lens[1] = 0;
	lens[2] = 4;
	CHECK_RV(rdzv_client_multi_set(c, keys, (const void *const *)vals,
	    lens, 3, 5000), 0);
	memset(gv, 0, sizeof gv);
	CHECK_RV(rdzv_client_multi_get(c, keys, 3, gv, lens, 5000), 0);
	CHECK(gv[0] != NULL && lens[0] == 2 && memcmp(gv[0], "v1", 2) == 0);
	CHECK(gv[1] != NULL && lens[1] == 0);
	CHECK(gv[2] != NULL && lens[2] == 4 && memcmp(gv[2], "v333", 4) == 0);
	for (i = 0; i < 3; i++)
		free(gv[i]);
	keys[1] = "nope";
	memset(gv, 0, sizeof gv);
	CHECK_RV(rdzv_client_multi_get(c, keys, 3, gv, lens, 5000),
	    RDZV_ENOTFOUND);
	CHECK(gv[0] == NULL && gv[1] == NULL && gv[2] == NULL);

	/* queues */
	CHECK_RV(rdzv_client_queue_push(c, "q", "first", 5, 5000), 0);
	CHECK_RV(rdzv_client_queue_push(c, "q", "second", 6, 5000), 0);
	CHECK_RV(rdzv_client_queue_len(c, "q", &iv, 5000), 0);
	CHECK(iv == 2);
	v = NULL;
	CHECK_RV(rdzv_client_queue_pop(c, "q", &v, &len, 5000), 0);
	CHECK_VALUE(v, len, "first");
	CHECK_RV(rdzv_client_queue_pop(c, "q", &v, &len, 0), 0);
	CHECK_VALUE(v, len, "second");
	CHECK_RV(rdzv_client_queue_pop(c, "q", &v, &len, 0), RDZV_ETIMEDOUT);
	CHECK_RV(rdzv_client_queue_pop(c, "q", &v, &len, 100), RDZV_ETIMEDOUT);
	CHECK_RV(rdzv_client_queue_len(c, "q", &iv, 5000), 0);
	CHECK(iv == 0);

	/* list_keys */
	list = NULL;
	n = 0;
	CHECK(rdzv_client_list_keys(c, &list, &n, 5000) > 0);
	found = 0;
	for (i = 0; i < n; i++)
		if (strcmp(list[i], "log") == 0 || strcmp(list[i], "m3") == 0)
			found++;
	CHECK(found == 2);
	rdzv_client_free_keys(list, n);

	/* barrier of 2 over two connections: one waits, then the other */
	CHECK_RV(rdzv_client_barrier(c, "bar", 1, 5000), 0);
	CHECK_RV(rdzv_client_barrier(c, "bar2", 2, 100), RDZV_ETIMEDOUT);
	CHECK(rdzv_client_alive(c));

	/* watch: a SET from another connection is pushed */
	rdzv_client_set_push_cb(c, push_cb, &pushes);
	CHECK_RV(rdzv_client_watch(c, "w", 5000), 0);
	if (c2 != NULL) {
		CHECK_RV(rdzv_client_set(c2, "w", "1", 1, 5000), 0);
		CHECK(rdzv_client_poll_push(c, 2000) >= 1 ||
		    pushes.n >= 1);
		CHECK(pushes.last_op == NAT_OP_WATCH_EVENT);
	}

	/* namespaces are separate */
	CHECK_RV(rdzv_client_set_namespace(c, ""), 0);
	CHECK_RV(rdzv_client_get(c, "log", &v, &len, 5000), RDZV_ENOTFOUND);
	CHECK_RV(rdzv_client_set_namespace(c, ns), 0);
	{
		char	big[1100];

		memset(big, 'x', sizeof big - 1);
		big[sizeof big - 1] = '\0';
		CHECK_RV(rdzv_client_set_namespace(c, big), RDZV_ETOOBIG);
	}
	CHECK_RV(rdzv_client_ping(c, 5000), 0);

	/* big value */
	{
		size_t	bl = 4u << 20;
		char	*big = malloc(bl);

		CHECK(big != NULL);
		if (big != NULL) {
			for (i = 0; i < bl; i++)
				big[i] = (char)(i * 7);
			CHECK_RV(rdzv_client_set(c, "big", big, bl, 10000), 0);
			v = NULL;
			CHECK_RV(rdzv_client_get(c, "big", &v, &len, 10000), 0);
			CHECK(v != NULL && len == bl && memcmp(v, big, bl) == 0);
			free(v);
			free(big);
		}
	}

	rdzv_client_close(c2);
	rdzv_client_close(c);
	printf("client_check: %d checks, %d failed\n", checks, failed);
	return (failed == 0 ? 0 : 1);
}
