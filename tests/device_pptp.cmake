# device_pptp.cmake: pipeline stages of tensor-parallel shards or context-parallel rows on device buffers
# (`train --device sim|cuda --pp 2` with --tp 2, --tp 2 x dp 2 on 8 ranks at ZeRO 1-3, --cp 2, --cp 2 x dp 2 at ZeRO 2-3) against one CPU process, and the
# tp 2 x pp 2 checkpoint on one CPU process and on the CPU's tp 2 x pp 2 layout.
bs_device_layouts(pptp test_device_pptp.py)
