/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_STATIC_H
#define FW_SERVER_STATIC_H

#include <stdbool.h>

struct request;

/* True for the paths the UI owns: /, /ui, /ui/..., /favicon.ico. */
bool static__is_ui_path(const char *path);
/* Replies with the embedded UI file for path (GET/HEAD), 404 or 400. */
void static__serve(struct request *r, const char *path);

#endif
