# device_pp.cmake: pipeline parallelism on device buffers (`train --device sim|cuda --pp` under mpirun, the host path)
# against one CPU process, its checkpoint on CPU layouts, a missing wait sim shows, and its refusals.
bs_device_layouts(pp test_device_pp.py)
