/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.c: the token challenge-response's crypto (HMAC-SHA256 through
 * OpenSSL, a constant-time compare), job credentials (derived, parsed,
 * written) and reading token files.
 */
#include "config.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "rdzv_err.h"
#include "wire.h"

int
nat_auth_mac(const void *token, size_t tokenlen, const char *tag,
    const uint8_t first[NAT_NONCE_LEN], const uint8_t second[NAT_NONCE_LEN],
    uint8_t mac[NAT_MAC_LEN])
{
	uint8_t		msg[64 + 2 * NAT_NONCE_LEN];
	size_t		tl = strlen(tag);
	unsigned int	maclen = 0;

	if (tl > 64 || tokenlen > INT32_MAX)
		return -1;
	memcpy(msg, tag, tl);
	memcpy(msg + tl, first, NAT_NONCE_LEN);
	memcpy(msg + tl + NAT_NONCE_LEN, second, NAT_NONCE_LEN);
	if (HMAC(EVP_sha256(), token, (int)tokenlen, msg,
	    tl + 2 * NAT_NONCE_LEN, mac, &maclen) == NULL ||
	    maclen != NAT_MAC_LEN)
		return -1;
	return 0;
}

int
nat_mac_equal(const uint8_t a[NAT_MAC_LEN], const uint8_t b[NAT_MAC_LEN])
{
	return CRYPTO_memcmp(a, b, NAT_MAC_LEN) == 0;
}

int
rdzv_cred_job_ok(const void *job, size_t len)
{
	const uint8_t	*p = job;
	size_t		 i;

	if (len == 0 || len > RDZV_CRED_JOB_MAX)
		return 0;
	for (i = 0; i < len; i++)
		if (!isgraph(p[i]))
			return 0;
	return 1;
}

int
rdzv_cred_derive(const void *secret, size_t secretlen, const void *job,
    size_t joblen, uint8_t key[RDZV_CRED_KEY_LEN])
{
	uint8_t		msg[sizeof RDZV_CRED_HEADER + RDZV_CRED_JOB_MAX];
	unsigned int	keylen = 0;
	int		rc = -1;

	if (!rdzv_cred_job_ok(job, joblen) || secretlen > INT32_MAX)
		return -1;
	/* The header's NUL separates the label from the id. */
	memcpy(msg, RDZV_CRED_HEADER, sizeof RDZV_CRED_HEADER);
	memcpy(msg + sizeof RDZV_CRED_HEADER, job, joblen);
	if (HMAC(EVP_sha256(), secret, (int)secretlen, msg,
	    sizeof RDZV_CRED_HEADER + joblen, key, &keylen) != NULL &&
	    keylen == RDZV_CRED_KEY_LEN)
		rc = 0;
	explicit_bzero(msg, sizeof msg);
	return rc;
}

/* The value of hex digit c, or -1. */
static int
cred_hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * One line of p (len bytes) from *off: it must start with tag; sets *v
 * and *vlen to the rest of it and moves *off past its newline.
 */
static int
cred_line(const uint8_t *p, size_t len, size_t *off, const char *tag,
    const uint8_t **v, size_t *vlen)
{
	size_t	tl = strlen(tag), end;

	for (end = *off; end < len && p[end] != '\n'; end++)
		;
	if (end - *off < tl || memcmp(p + *off, tag, tl) != 0)
		return -1;
	*v = p + *off + tl;
	*vlen = end - *off - tl;
	*off = end < len ? end + 1 : end;
	return 0;
}

int
rdzv_cred_parse(const uint8_t *tok, size_t len, struct rdzv_cred *cred,
    char *why, size_t whysz)
{
	const uint8_t	*v;
	size_t		 off = 0, vlen, i;
	int		 hi, lo;

	memset(cred, 0, sizeof *cred);
	if (cred_line(tok, len, &off, RDZV_CRED_HEADER, &v, &vlen) != 0 ||
	    vlen > 1 || (vlen == 1 && v[0] != '\r'))
		return 0;	/* no header: the operator's secret */
	if (cred_line(tok, len, &off, "job ", &v, &vlen) != 0 ||
	    !rdzv_cred_job_ok(v, vlen)) {
		snprintf(why, whysz, "a job credential without a valid "
		    "\"job ID\" line");
		return RDZV_EINVAL;
	}
	memcpy(cred->job, v, vlen);
	cred->job[vlen] = '\0';
	cred->joblen = vlen;
	if (cred_line(tok, len, &off, "key ", &v, &vlen) != 0 ||
	    vlen != 2 * RDZV_CRED_KEY_LEN || off != len) {
		snprintf(why, whysz, "a job credential without a \"key HEX\" "
		    "line of %d hex digits last", 2 * RDZV_CRED_KEY_LEN);
		goto bad;
	}
	for (i = 0; i < RDZV_CRED_KEY_LEN; i++) {
		if ((hi = cred_hexval(v[2 * i])) < 0 ||
		    (lo = cred_hexval(v[2 * i + 1])) < 0) {
			snprintf(why, whysz, "a job credential whose key is "
			    "not hex");
			goto bad;
		}
		cred->key[i] = (uint8_t)(hi << 4 | lo);
	}
	return 1;
bad:
	explicit_bzero(cred, sizeof *cred);
	return RDZV_EINVAL;
}

int
rdzv_cred_format(const struct rdzv_cred *cred, char *buf, size_t bufsz)
{
	char	hex[2 * RDZV_CRED_KEY_LEN + 1];
	size_t	i;
	int	n;

	for (i = 0; i < RDZV_CRED_KEY_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", cred->key[i]);
	n = snprintf(buf, bufsz, RDZV_CRED_HEADER "\njob %s\nkey %s\n",
	    cred->job, hex);
	explicit_bzero(hex, sizeof hex);
	if (n < 0 || (size_t)n >= bufsz)
		return -1;
	return n;
}

int
rdzv_random(void *buf, size_t n)
{
	uint8_t	*p = buf;
	ssize_t	 r;

	while (n > 0) {
		if ((r = getrandom(p, n, 0)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int
rdzv_token_load(const char *path, uint8_t **tok, size_t *len, int *insecure,
    char *why, size_t whysz)
{
	uint8_t		 buf[RDZV_TOKEN_MAX + 2];
	struct stat	 st;
	ssize_t		 n;
	size_t		 got = 0;
	int		 fd;

	*tok = NULL;
	*len = 0;
	*insecure = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		snprintf(why, whysz, "cannot read token file %s: %s", path,
		    strerror(errno));
		return RDZV_EINVAL;
	}
	if (fstat(fd, &st) == 0 && (st.st_mode & 077) != 0)
		*insecure = 1;
	while (got < sizeof buf &&
	    (n = read(fd, buf + got, sizeof buf - got)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			snprintf(why, whysz, "cannot read token file %s: %s",
			    path, strerror(errno));
			close(fd);
			return RDZV_EIO;
		}
		got += (size_t)n;
	}
	close(fd);
	if (got > 0 && buf[got - 1] == '\n')
		got--;
	if (got > 0 && buf[got - 1] == '\r')
		got--;
	if (got == 0 || got > RDZV_TOKEN_MAX) {
		snprintf(why, whysz, "token file %s is %s (1 to %d bytes)", path,
		    got == 0 ? "empty" : "too long", RDZV_TOKEN_MAX);
		return RDZV_EINVAL;
	}
	if ((*tok = malloc(got)) == NULL) {
		snprintf(why, whysz, "out of memory");
		return RDZV_ENOMEM;
	}
	memcpy(*tok, buf, got);
	*len = got;
	explicit_bzero(buf, sizeof buf);
	return 0;
}
