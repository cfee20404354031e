/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_admin.c: rdzvctl's commands about rdzvd itself rather than a job
 * or a key: status (version, uptime, durability, database, keys,
 * waiters, connections, jobs by state).
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "ctl.h"
#include "wire.h"

int
cmd_status(struct ctl *ctl, int argc, char **argv)
{
	json_t	*doc, *jobs, *ld;
	char	*text, buf[64];
	size_t	 len;
	int	 rv;

	if ((rv = ctl_request(ctl, "status", NULL, &text, &len,
	    NAT_OP_ADMIN_STATUS, "")) != 0)
		return rv;
	if ((rv = ctl_document(ctl, text, len, &doc)) != 0 || doc == NULL)
		return rv;
	jobs = json_object_get(doc, "jobs");
	printf("rdzvd %s at %s\n", ctl_jstr(doc, "version"), ctl->o.endpoint);
	printf("uptime       %s\n", ctl_fmt_duration(buf, sizeof buf,
	    ctl_jint(doc, "uptime_s") * 1000));
	printf("durability   %s\n", ctl_jstr(doc, "durability"));
	if ((ld = json_object_get(doc, "leader")) != NULL) {
		printf("store        %s\n", ctl_jstr(ld, "store"));
		printf("leader       %s, term %" PRId64 ", for %s, after %"
		    PRId64 " other leaderships\n",
		    json_is_true(json_object_get(ld, "leading")) ?
		    "this rdzvd" : "another rdzvd", ctl_jint(ld, "term"),
		    ctl_fmt_duration(buf, sizeof buf, ctl_jint(ld, "since_s") *
		    1000), ctl_jint(ld, "failovers"));
		if (json_is_string(json_object_get(ld, "listen")))
			printf("leader at    %s (clients %s, http %s)\n",
			    ctl_jstr(ld, "host"), ctl_jstr(ld, "listen"),
			    json_is_string(json_object_get(ld, "http")) ?
			    ctl_jstr(ld, "http") : "off");
	} else
		printf("database     %s\n",
		    json_is_string(json_object_get(doc, "db")) ?
		    ctl_jstr(doc, "db") : "none (nothing persists)");
	printf("keys         %" PRId64 "\n", ctl_jint(doc, "keys"));
	printf("waiters      %" PRId64 "\n", ctl_jint(doc, "waiters"));
	printf("connections  %" PRId64 "\n", ctl_jint(doc, "connections"));
	printf("jobs         %" PRId64 " running, %" PRId64 " forming, %"
	    PRId64 " closed\n", ctl_jint(jobs, "running"),
	    ctl_jint(jobs, "forming"), ctl_jint(jobs, "closed"));
	if (json_object_get(doc, "rounds_total") != NULL)
		printf("rounds       %" PRId64 " (%" PRId64 " restarts)\n",
		    ctl_jint(doc, "rounds_total"),
		    ctl_jint(doc, "restarts_total"));
	json_decref(doc);
	return CTL_EXIT_OK;
}
