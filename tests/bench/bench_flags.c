/*  bench_flags.c: --help, --mode and the shared load rows of the benches. */
#include "bench_flags.h"

#include <stdio.h>
#include <string.h>

int oq_bench_flags_parse(const char *program, const char *usage, const char *epilogue,
                         const oq_flag_t *flags, size_t count, int argc, char **argv)
{
    oq_flag_t all[OQ_FLAGS_MAX];
    bool help = false;
    if (count + 1 > OQ_FLAGS_MAX) {
        fprintf(stderr, "%s: %zu flags, more than a table holds\n", program, count);
        return -1;
    }
    memcpy(all, flags, count * sizeof *flags);
    all[count++] = (oq_flag_t){
        .name = "help", .kind = OQ_FLAG_BOOL, .stop = true, .dest = &help, .help = "this text"};
    int rc = oq_flags_parse(program, all, count, argc, argv);
    if (rc < 0)
        return -1;
    if (help) {
        bool env = false;
        for (size_t i = 0; i < count; i++)
            env |= all[i].env != NULL;
        fputs(usage, stdout);
        printf("\noptions%s:\n", env ? " (environment variable in brackets)" : "");
        oq_flags_help(all, count, stdout);
        if (epilogue)
            printf("\n%s", epilogue);
        return 1;
    }
    return rc;
}

int oq_bench_modes_parse(const char *value, void *dest, char *why, size_t why_len)
{
    (void)why; /* the row's expected text names the modes */
    (void)why_len;
    oq_bench_modes_t *modes = dest;
    bool all = strcmp(value, "all") == 0, known = all;
    for (int m = 0; m < modes->count; m++)
        if (all || strcmp(value, modes->names[m]) == 0) {
            modes->chosen[m] = true;
            known = true;
        }
    modes->given = true;
    return known ? 0 : -1;
}

void oq_bench_modes_settle(oq_bench_modes_t *modes)
{
    if (modes->given)
        return;
    for (int m = 0; m < modes->count; m++)
        modes->chosen[m] = true;
}
