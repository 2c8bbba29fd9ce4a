# device_dp.cmake: data parallelism on device buffers (`train --device sim|cuda` under mpirun, the host path) against
# one CPU process, its checkpoint on one process, and its refusals (device_dp_sim; device_dp_gpu on a GPU).
bs_device_layouts(dp test_device_dp.py)
