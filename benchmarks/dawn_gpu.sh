#!/bin/bash
# The issue-34 device call: Dawn and the matrix units on the lent GPU, torch in the same call (bash benchmarks/dawn_gpu.sh;
# the device README says how .gl and .whl are prepared and carried).
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
echo "== sgm check (dawn)"
SCELLIS_WEBGPU=dawn timeout 90 python3 benchmarks/sgm_check.py 2>&1 | tail -22
echo "== f16 matmul, dawn, sgm (tier prod)"
SCELLIS_WEBGPU=dawn timeout 100 python3 benchmarks/kernels.py --sections matmul --sizes 4096,8192 --dtypes f16 --tier prod --no-write 2>&1 | grep -v "^#" | tail -3
echo "-- tile sgm_wide 4096"; SCELLIS_MATMUL_SGM_TILE=sgm_wide SCELLIS_WEBGPU=dawn timeout 50 python3 benchmarks/kernels.py --sections matmul --sizes 4096 --dtypes f16 --tier prod --no-write --no-torch 2>&1 | grep matmul
echo "-- unchecked device (disable_robustness, skip_validation)"
SCELLIS_WGPU_SHADER_CHECKS=none SCELLIS_WEBGPU=dawn timeout 60 python3 benchmarks/kernels.py --sections matmul --sizes 4096,8192 --dtypes f16 --tier prod --no-write --no-torch 2>&1 | grep matmul
echo "== f32 matmul: dawn vs wgpu-native (tier debug)"
SCELLIS_WEBGPU=dawn timeout 60 python3 benchmarks/kernels.py --sections matmul --sizes 4096 --dtypes f32 --no-write 2>&1 | grep matmul
SCELLIS_WEBGPU=wgpu-native timeout 60 python3 benchmarks/kernels.py --sections matmul --sizes 4096 --dtypes f32 --no-write --no-torch 2>&1 | grep matmul
echo "== attention f16 (tier prod), dawn"
SCELLIS_WEBGPU=dawn timeout 100 python3 benchmarks/kernels.py --sections attention --dtypes f16 --tier prod --attn-lengths 1024,4096 --no-write 2>&1 | grep -v "^#" | tail -6
echo "== GPT mixed step, dawn"
SCELLIS_MATMUL_TUNE=off SCELLIS_WEBGPU=dawn timeout 150 python3 benchmarks/training.py --devices wgpu --models gpt_mixed --steps 10 --no-write 2>&1 | tail -3
