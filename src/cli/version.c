/* version.c: `batchscale --version`: the git revision it was built from and
 * whether the CUDA device backend is built in. */
#include "cli/version.h"

#include <stdio.h>

#include "device/device.h"
#include "git_revision.h" /* generated at build time by scripts/git_revision.cmake */

int cmd_version(void) {
    printf("batchscale %s\ncuda: %s\n", BS_GIT_REVISION, device_cuda_build());
    return 0;
}
