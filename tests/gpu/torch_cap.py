"""PyTorch under libslice on a real GPU: torch.cuda.mem_get_info() shows the cap and allocations
stop with OutOfMemoryError at the cap. Run with LD_PRELOAD=libslice.so and SLICE_MEMORY_LIMIT."""
import sys

import torch

cap = int(sys.argv[1])
free, total = torch.cuda.mem_get_info()
print(f"mem_get_info: free {free} total {total} (cap {cap})")
assert total == cap, "PyTorch does not see the cap"
blocks = []
block = 256 << 20
try:
    while True:
        blocks.append(torch.empty(block, dtype=torch.uint8, device="cuda"))
        assert len(blocks) * block <= cap, "allocated past the cap"
except torch.cuda.OutOfMemoryError as e:
    print(f"OutOfMemoryError after {len(blocks)} blocks of 256 MiB: {str(e).splitlines()[0]}")
assert len(blocks) * block > cap - 2 * block - (cap - free), "refused long before the cap"
x = torch.ones(1024, device="cuda")
assert float((x + 1).sum()) == 2048.0
print("PASS")
