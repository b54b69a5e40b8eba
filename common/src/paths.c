/*  paths.c: files found relative to the running executable. */
#include "onceq/paths.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The data directory relative to the binaries' directory, from the
   install layout (common/CMakeLists.txt); relative, so no absolute path is
   compiled in. */
#ifndef ONCEQ_DATA_FROM_BIN
#error "ONCEQ_DATA_FROM_BIN must name the data directory relative to the bin directory"
#endif

int oq_paths_exe_dir(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = 0;
    int w = snprintf(out, len, "%s", exe[0] ? exe : "/");
    return w < 0 || (size_t)w >= len ? -1 : 0;
}

int oq_paths_data(const char *rel, char *out, size_t len)
{
    char dir[PATH_MAX];
    if (oq_paths_exe_dir(dir, sizeof dir) < 0)
        return -1;
    int w = snprintf(out, len, "%s/%s%s%s", dir, ONCEQ_DATA_FROM_BIN, rel && *rel ? "/" : "",
                     rel ? rel : "");
    return w < 0 || (size_t)w >= len ? -1 : 0;
}
