# device_zero.cmake: ZeRO 2 and 3 together with tensor, context and pipeline parallelism on device buffers
# (`train --device sim|cuda` on 4 ranks) against one CPU process, the memory each stage saves, ZeRO 3 with --pp's refusal.
bs_device_layouts(zero_layouts test_device_zero_layouts.py)
