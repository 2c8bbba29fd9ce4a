/* version.h: `batchscale --version`: the revision and what is built in. */
#ifndef BS_CLI_VERSION_H
#define BS_CLI_VERSION_H

int cmd_version(void);

#endif
