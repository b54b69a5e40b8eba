/*  onceq/paths.h: where a binary finds the files installed next to it (the
    migrations, deploy/pg.sh), from the path of the running executable
    instead of a path compiled in: an install can then be moved or packaged
    under any prefix, and no source or build-tree path ends up in an
    installed file.

    Installed, a binary in PREFIX/bin finds PREFIX/share/onceq. The build
    tree mirrors that layout: the build writes BUILD/share/onceq with links
    to the checkout's deploy/sql and deploy/pg.sh next to BUILD/bin, so a
    binary run from the build tree finds the checkout's current files by
    the same rule. */
#ifndef ONCEQ_PATHS_H
#define ONCEQ_PATHS_H

#include <stddef.h>

/* The directory of the running executable (/proc/self/exe). 0 or -1. */
int oq_paths_exe_dir(char *out, size_t len);

/* EXE_DIR/../share/onceq/rel (rel may be "" for the directory itself),
   whether or not it exists. 0, or -1 if the executable's path is unknown
   or the result does not fit. */
int oq_paths_data(const char *rel, char *out, size_t len);

#endif
