"""Dense peak TFLOP/s of the GPUs the harness knows, per precision, for MFU (model FLOPs
utilisation = achieved FLOP/s / peak). Dense (no 2:4 sparsity) figures from NVIDIA's data
sheets:
  A100 SXM 80 GB: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
      FP32 19.5, TF32 156, BF16 312
  H100 SXM / PCIe: https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
      SXM: FP32 67, TF32 494.5, BF16 989 (the sheet prints TF32/BF16 with sparsity: 989 / 1,979; 528
      tensor cores x 1,024 FLOP a clock x 1.83 GHz is 989.4 dense): conf/hardware's H100 presets use the same 989
      PCIe: FP32 51, TF32 378, BF16 756 (with sparsity: 756 / 1,513)
  H200 SXM: https://www.nvidia.com/en-us/data-center/h200/  (same tensor cores as H100 SXM)
A CPU, or a GPU not in the table, has no known peak: its MFU is left empty (null).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

#: device-name substring (most specific first) -> precision -> dense peak TFLOP/s
PEAK_TFLOPS = (
    ("H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0}),
    ("H100", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.0}),
    ("H200", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.0}),
    ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0}),
)


def peak_tflops(device_name: str, precision: str) -> Optional[float]:
    """The table's peak for a device name (as torch.cuda.get_device_name gives it), or None."""
    for fragment, peaks in PEAK_TFLOPS:
        if fragment in device_name:
            return peaks.get(precision)
    return None


def device_peak_tflops(device: torch.device, precision: str) -> Optional[float]:
    import torch

    if device.type != "cuda":
        return None
    return peak_tflops(torch.cuda.get_device_name(device), precision)
