/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.c: the token challenge-response's crypto (HMAC-SHA256 through
 * OpenSSL, a constant-time compare) and reading token files.
 */
#include "config.h"

#include <sys/random.h>
#include <sys/stat.h>

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
