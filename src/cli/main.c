/* main.c: `batchscale <command> [options]`: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/subject_flags.h"
#include "cli/version.h"
#include "kernels/blas_cpu.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} Command;

static const Command commands[] = {
    {"train", cmd_train, "train a GPT (one process, or many under mpirun)"},
    {"prepare", cmd_prepare, "turn text files into token shards (llm.c format)"},
    {"sample", cmd_sample, "generate text from a checkpoint"},
    {"bench", cmd_bench, "micro-benchmarks (gemm, comm, cpu, --calibrate)"},
    {"tokenizer", cmd_tokenizer, "train a BPE tokenizer; encode and decode text"},
    {"ckpt", cmd_ckpt, "inspect and verify checkpoints; export/import llm.c model files"},
    {"run", cmd_run, "run a job under mpirun, restarting it from its last checkpoint when a rank dies"},
    {"plan", cmd_plan, "size a training run on up to tens of thousands of GPUs"},
    {"report", cmd_report, "an HTML page and PNG charts of a run's metrics"},
    {"batch-sweep", cmd_batch_sweep, "train at a grid of batch sizes to a target loss; fit the critical batch"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: batchscale <command> [options]   (batchscale <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    blas_ensure_cpu_kernels(argv);
    cli_name_subjects(); /* library reasons name quantities; the flags that set them come from here */
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) return cmd_version();
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "batchscale: error: unknown command '%s' (`batchscale --help` lists them)\n", argv[1]);
    return 2;
}
