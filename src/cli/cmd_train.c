/* cmd_train.c: `batchscale train`: flags (cli/train_options.h) -> TrainConfig -> train_run. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/model_flags.h"
#include "cli/options.h"
#include "cli/run_config.h"
#include "cli/train_options.h"
#include "comm/comm.h"
#include "core/error.h"
#include "train/lora_flags.h"
#include "train/train_config.h"
#include "train/trainer.h"

int cmd_train(int argc, char **argv) {
    TrainConfig c;
    memset(&c, 0, sizeof c); /* every field has its default in the option table */
    OptionSpec specs[TRAIN_OPTIONS_MAX];
    OptionSection sections[TRAIN_SECTIONS_MAX];
    bool given[TRAIN_OPTIONS_MAX];
    const OptionTable table = train_options(&c, specs, sections, given);
    const int count = table.count;
    comm_start(NULL, NULL);         /* first: under mpirun a bad flag is then one line from rank 0 */
    bs_die_status(BS_EXIT_USAGE);   /* until the trainer is set up (train_run) */
    ConfigArgs args = config_file_expand(specs, count, argc, argv); /* the file's flags first: the command line wins */
    if (!options_parse_table(&table, args.argc, args.argv,
                             "usage: batchscale train [options]\n\nTrains a GPT-2 style model on token shards.")) {
        config_args_free(&args);
        comm_stop();
        return 0;
    }
    train_options_record_given(&table, &c); /* the options given: the only answer to "did the user give it?" */
    model_flags_adopt(&c, &table);          /* an --init-from file sets the shape flags */
    char why[512];
    TrainConfig resolved = c; /* config.json: the options given (a repeat leaves the others out too), and these */
    if (!lora_flags_resolve(&resolved, why, sizeof why)) bs_die("%s", why); /* LoRA flags left out: --lora-init's */
    if (!train_config_check(&resolved, why, sizeof why)) bs_die("%s", why); /* before any process group exists */
    int mpi_argc = args.argc;
    char **mpi_argv = args.argv;
    Comm *world = comm_init(&mpi_argc, &mpi_argv, c.parallel.comm_algo, c.parallel.ranks_per_node, c.parallel.comm_timeout, "data-parallel");
    if (comm_rank(world) == 0 && c.output.out[0])
        run_config_write(c.output.out, &table, &c, &resolved, argc, argv, comm_size(world));
    int status = train_run(&c, world);
    comm_finalize(world);
    config_args_free(&args);
    return status;
}
