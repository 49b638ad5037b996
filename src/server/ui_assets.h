/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_UI_ASSETS_H
#define FW_SERVER_UI_ASSETS_H

#include <stddef.h>

/*
 * The web UI's files, compiled into the binary from a C file that
 * ui/build.mjs generates at build time (build/gen/ui_assets.c), so the UI
 * works with no files on disk and no network.
 */
struct ui_asset {
	const char *name;		/* file name, no directory: "index.html" */
	const char *content_type;
	const char *etag;		/* quoted, as sent */
	int immutable;			/* the name carries a hash of the bytes */
	const unsigned char *data;
	size_t len;
	const unsigned char *gzip;	/* the same bytes, gzip-compressed */
	size_t gzip_len;
};

extern const struct ui_asset ui_assets[];
extern const unsigned int ui_nassets;

#endif
