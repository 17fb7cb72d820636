"""What the CUDA runtime, PyTorch and nvidia-smi show under libslice (issue 26): the slice.

    python3 tests/gpu/frameworks/runtime_view.py [--allow-missing] [--timeout S]

Run under SLICE_MEMORY_LIMIT=<bytes>. torch.cuda.get_device_properties(0).total_memory (the runtime's
cudaGetDeviceProperties: totalGlobalMem) and torch.cuda.mem_get_info()'s total must be the cap, the
context must be in use (total - free > 0, on a card's real context); nvidia-smi run as a child of this
process (as SGLang runs it: `--query-gpu=memory.total`), with this process's environment, must show the
cap too (its NVML is hooked by the libslice it inherits).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402


def body(args, data):
    cap = cc.cap_bytes(args)
    torch = cc.import_module("torch")
    if not torch.cuda.is_available():
        cc.no_device("torch", "torch.cuda.is_available() is False")
    total_memory = int(torch.cuda.get_device_properties(0).total_memory)
    free, total = torch.cuda.mem_get_info()
    data.update(cap_bytes=cap, total_memory=total_memory, mem_get_info_total=total, context_bytes=total - free)
    cc.log(f"total_memory {cc.fmt_bytes(total_memory)}, mem_get_info total {cc.fmt_bytes(total)}, "
           f"free {cc.fmt_bytes(free)}")
    cc.expect(total_memory == cap, f"get_device_properties().total_memory is {cc.fmt_bytes(total_memory)}, not the cap")
    cc.expect(total == cap, f"mem_get_info total is {cc.fmt_bytes(total)}, not the cap")
    cc.expect(total - free > 0, "nothing in use after the context: the context was not charged")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise cc.CheckFailed(f"nvidia-smi did not run as a child: {e}")
    rows = [r.strip() for r in smi.stdout.splitlines() if r.strip().isdigit()]
    data["nvidia_smi_total_mib"] = rows
    cc.log(f"nvidia-smi as a child: memory.total {rows} MiB")
    cc.expect(str(cap >> 20) in rows, f"nvidia-smi as a child says {rows} MiB, not the cap's {cap >> 20}")
    return (f"totalGlobalMem and mem_get_info total are the cap ({cc.fmt_bytes(cap)}), the context "
            f"{cc.fmt_bytes(total - free)} in use, nvidia-smi as a child {cap >> 20} MiB")


def main():
    args = cc.parser(__doc__.split("\n\n")[0]).parse_args()
    cc.run("runtime-view", body, args)


if __name__ == "__main__":
    main()
