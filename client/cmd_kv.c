/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_kv.c: rdzvctl kv get|set|del|list, the key-value store in one
 * namespace, through common/client.h's calls (the same a worker makes),
 * not an operator request.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client.h"
#include "ctl.h"
#include "rdzv_err.h"

#define CTL_VALUE_MAX		((size_t)64 << 20)	/* kv set VALUE from stdin */

/* Reads all of stdin (kv set KEY -). */
static int
cmd_kv_read_stdin(char **buf, size_t *len)
{
	char	*p = NULL, *np;
	size_t	 n = 0, cap = 0, r;

	for (;;) {
		if (cap - n < 4096) {
			if (cap > CTL_VALUE_MAX) {
				free(p);
				return RDZV_ETOOBIG;
			}
			cap = cap == 0 ? 65536 : cap * 2;
			if ((np = realloc(p, cap)) == NULL) {
				free(p);
				return RDZV_ENOMEM;
			}
			p = np;
		}
		r = fread(p + n, 1, cap - n, stdin);
		n += r;
		if (r == 0)
			break;
	}
	if (ferror(stdin)) {
		free(p);
		return RDZV_EIO;
	}
	*buf = p;
	*len = n;
	return 0;
}

static int
cmd_kv_strcmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A JSON object {"ns": ns, "key": key} for the kv outputs. */
static json_t *
cmd_kv_json(const char *ns, const char *key)
{
	return json_pack("{s:s, s:s}", "ns", ns, "key", key);
}

static int
cmd_kv_get(struct ctl *ctl, struct rdzv_client *c, const char *key)
{
	json_t	*o, *v;
	void	*val;
	size_t	 len, i;
	char	*hex;
	int	 rv;

	if ((rv = rdzv_client_get(c, key, &val, &len, ctl->o.timeout_ms)) != 0)
		return rv;
	if (!ctl->json) {
		fwrite(val, 1, len, stdout);
		putchar('\n');
		free(val);
		return 0;
	}
	o = cmd_kv_json(ctl->ns, key);
	if ((v = json_stringn(val, len)) != NULL)
		json_object_set_new(o, "value", v);
	else if ((hex = malloc(len * 2 + 1)) != NULL) {
		/* Not UTF-8: hex keeps every byte, readable by any tool. */
		for (i = 0; i < len; i++)
			snprintf(hex + 2 * i, 3, "%02x",
			    ((unsigned char *)val)[i]);
		hex[2 * len] = '\0';
		json_object_set_new(o, "value_hex", json_string(hex));
		free(hex);
	}
	free(val);
	ctl_print_json(o);
	json_decref(o);
	return 0;
}

static int
cmd_kv_set(struct ctl *ctl, struct rdzv_client *c, const char *key,
    const char *arg)
{
	json_t	*o;
	char	*val;
	size_t	 len;
	int	 rv;

	if (strcmp(arg, "-") == 0) {
		if ((rv = cmd_kv_read_stdin(&val, &len)) != 0) {
			fprintf(stderr, "rdzvctl: kv set: cannot read the value "
			    "from stdin: %s\n", rdzv_strerror(rv));
			return CTL_EXIT_USAGE;
		}
	} else {
		len = strlen(arg);
		if ((val = strdup(arg)) == NULL)
			return RDZV_ENOMEM;
	}
	rv = rdzv_client_set(c, key, val, len, ctl->o.timeout_ms);
	free(val);
	if (rv != 0)
		return rv;
	if (ctl->json) {
		o = cmd_kv_json(ctl->ns, key);
		json_object_set_new(o, "bytes", json_integer((json_int_t)len));
		ctl_print_json(o);
		json_decref(o);
	}
	return 0;
}

static int
cmd_kv_del(struct ctl *ctl, struct rdzv_client *c, const char *key)
{
	json_t	*o;
	int	 rv;

	if ((rv = rdzv_client_delete(c, key, ctl->o.timeout_ms)) < 0)
		return rv;
	if (ctl->json) {
		o = cmd_kv_json(ctl->ns, key);
		json_object_set_new(o, "deleted", json_boolean(rv == 1));
		ctl_print_json(o);
		json_decref(o);
	}
	return rv == 1 ? 0 : RDZV_ENOTFOUND;
}

static int
cmd_kv_list(struct ctl *ctl, struct rdzv_client *c, const char *prefix)
{
	json_t	*o, *arr;
	char	**keys;
	size_t	 n, i, plen;
	int	 rv;

	if ((rv = rdzv_client_list_keys(c, &keys, &n, ctl->o.timeout_ms)) < 0)
		return rv;
	qsort(keys, n, sizeof *keys, cmd_kv_strcmp);
	plen = prefix != NULL ? strlen(prefix) : 0;
	arr = json_array();
	for (i = 0; i < n; i++) {
		if (plen > 0 && strncmp(keys[i], prefix, plen) != 0)
			continue;
		if (ctl->json)
			json_array_append_new(arr, json_string(keys[i]));
		else
			printf("%s\n", keys[i]);
	}
	rdzv_client_free_keys(keys, n);
	if (ctl->json) {
		o = json_pack("{s:s, s:o}", "ns", ctl->ns, "keys", arr);
		ctl_print_json(o);
		json_decref(o);
	} else
		json_decref(arr);
	return 0;
}

int
cmd_kv(struct ctl *ctl, int argc, char **argv)
{
	struct rdzv_client	*c;
	static const struct {
		const char	*name;
		int		 nargs;
	} subs[] = { { "get", 1 }, { "set", 2 }, { "del", 1 }, { "list", 0 } };
	const char		*sub = argv[0];
	char			 what[300];
	size_t			 i;
	int			 rv, status;

	for (i = 0; i < sizeof subs / sizeof subs[0]; i++)
		if (strcmp(sub, subs[i].name) == 0)
			break;
	if (i == sizeof subs / sizeof subs[0])
		return ctl_usage("kv: unknown subcommand \"%s\": get, set, "
		    "del or list", sub);
	if (argc - 1 != subs[i].nargs && !(i == 3 && argc - 1 <= 1))
		return ctl_usage("usage: rdzvctl kv %s%s", sub,
		    i == 0 || i == 2 ? " KEY" : i == 1 ? " KEY VALUE" :
		    " [PREFIX]");
	if ((c = ctl_connect(&ctl->o, 0, &status)) == NULL)
		return status;
	if ((rv = rdzv_client_set_namespace(c, ctl->ns)) != 0) {
		rdzv_client_close(c);
		return ctl_usage("--ns: a namespace is at most 1024 bytes");
	}
	switch (i) {
	case 0:
		rv = cmd_kv_get(ctl, c, argv[1]);
		break;
	case 1:
		rv = cmd_kv_set(ctl, c, argv[1], argv[2]);
		break;
	case 2:
		rv = cmd_kv_del(ctl, c, argv[1]);
		break;
	default:
		rv = cmd_kv_list(ctl, c, argc > 1 ? argv[1] : NULL);
	}
	if (rv > 0) {		/* already reported */
		rdzv_client_close(c);
		return rv;
	}
	strlcpy(ctl->errmsg, rdzv_client_errmsg(c), sizeof ctl->errmsg);
	rdzv_client_close(c);
	if (rv == 0)
		return CTL_EXIT_OK;
	/* kv list without a prefix has no argv[1] (NULL): no %s of it. */
	snprintf(what, sizeof what, "key \"%s\" in namespace \"%s\"",
	    argc > 1 ? argv[1] : "", ctl->ns);
	return ctl_fail(ctl, rv, what, "`rdzvctl kv list` shows the keys");
}
