# device_cp.cmake: context parallelism on device buffers (model/gpt_device_cp.h): `train --device sim --cp 2|4
# (ring and allgather; and x tp 2) against one CPU process, its checkpoint on one process, bf16's refusal.
bs_device_layouts(cp test_device_cp.py)
