/* adamw_table.h: the segment table of the fused AdamW (DK_ADAMW): the
 * layout's trained tensors clipped to a rank's update range (ZeRO), made on
 * the host when the range is set and copied to the device once. */
#ifndef BS_DEVICE_ADAMW_TABLE_H
#define BS_DEVICE_ADAMW_TABLE_H

#include <stddef.h>

#include "device/device_kernels.h"

/* out (capacity >= ntensors) = the parts of tensors (offset, trained count,
 * decays; first ignored) inside [r0, r1), empty parts left out, numbered
 * in order; *nsegs their number. Returns the parameters they hold. */
size_t adamw_table_clip(const AdamWSegment *tensors, int ntensors, size_t r0, size_t r1, AdamWSegment *out,
                        int *nsegs);

#endif
