# device_cp.cmake: context parallelism on device buffers (model/gpt_device_cp.h): `train --device sim --cp 2|4
# (ring and allgather; and x tp 2) against one CPU process, its checkpoint on one process.
bs_device_layouts(cp test_device_cp.py)
# bf16 and delayed FP8 with cp 2 on the device against the CPU's cp 2 in the same precision, within 4 x the floor of
# tests/layout_floor.py measured at cp's shape (T 256).
bs_device_layouts(precision_cp test_device_precision_cp.py)
set_property(TEST device_precision_cp_sim device_precision_cp_gpu APPEND PROPERTY ENVIRONMENT
  "BF16_DRIVER=$<TARGET_FILE:bf16_driver>")
