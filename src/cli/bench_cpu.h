/* bench_cpu.h: `batchscale bench cpu` (see bench_cpu.c). */
#ifndef BS_CLI_BENCH_CPU_H
#define BS_CLI_BENCH_CPU_H

/* argv[0] is "cpu"; returns the exit status */
int bench_cpu(int argc, char **argv);

#endif
