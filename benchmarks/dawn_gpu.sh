#!/bin/bash
# The issue-34 device call: Dawn and the matrix units on the lent GPU, torch in the same call (bash benchmarks/dawn_gpu.sh
# [sections...]; sections: check f16 designs attn gpt f32 unchecked, all by default; the device README says how .gl and .whl are
# prepared and carried). Everything it prints also goes to $OUT/log where OUT is set.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1
LOG=${OUT:-/tmp}/log
exec > >(tee -a "$LOG") 2>&1
want() { [ $# -eq 0 ] || [[ " $ARGS " == *" $1 "* ]]; }
ARGS="${*:-check f16 designs attn gpt f32 unchecked}"
K="python3 benchmarks/kernels.py --no-write"
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
if want check; then echo "== sgm check (dawn)"; SCELLIS_WEBGPU=dawn timeout 150 python3 benchmarks/sgm_check.py 2>&1 | tail -44; fi
if want f16; then
  echo "== f16 matmul, dawn, sgm (tier prod)"
  SCELLIS_WEBGPU=dawn timeout 100 $K --sections matmul --sizes 4096,8192 --dtypes f16 --tier prod 2>&1 | grep -v "^#" | tail -4
fi
if want designs; then
  echo "== sgm designs beside the engine's own kernels, one bare harness (4096^3 f16)"
  timeout 120 python3 benchmarks/sgm_designs.py
fi
if want attn; then
  echo "== attention f16 (tier prod), dawn"
  SCELLIS_WEBGPU=dawn timeout 150 $K --sections attention --dtypes f16 --tier prod --attn-lengths 1024,4096,16384 2>&1 | grep -v "^#" | tail -8
  echo "-- the same on the matrix-unit flash kernels (SCELLIS_ATTENTION_KERNEL=sgm)"
  SCELLIS_ATTENTION_KERNEL=sgm SCELLIS_WEBGPU=dawn timeout 150 $K --sections attention --dtypes f16 --tier prod --attn-lengths 1024,4096,16384 --no-torch 2>&1 | grep -v "^#" | tail -8
fi
if want gpt; then
  echo "== GPT mixed step, dawn"
  SCELLIS_MATMUL_TUNE=off SCELLIS_WEBGPU=dawn timeout 150 python3 benchmarks/training.py --devices wgpu --models gpt_mixed --steps 10 --no-write 2>&1 | tail -4
  echo "-- the same with SCELLIS_ATTENTION_KERNEL=sgm"
  SCELLIS_ATTENTION_KERNEL=sgm SCELLIS_MATMUL_TUNE=off SCELLIS_WEBGPU=dawn timeout 150 python3 benchmarks/training.py --devices wgpu --models gpt_mixed --steps 10 --no-write 2>&1 | tail -4
fi
if want f32; then
  echo "== f32 matmul: dawn vs wgpu-native (tier debug)"
  SCELLIS_WEBGPU=dawn timeout 60 $K --sections matmul --sizes 4096 --dtypes f32 2>&1 | grep matmul
  SCELLIS_WEBGPU=wgpu-native timeout 60 $K --sections matmul --sizes 4096 --dtypes f32 --no-torch 2>&1 | grep matmul
fi
if want unchecked; then
  echo "-- unchecked device (disable_robustness, skip_validation), f16 matmul"
  SCELLIS_WGPU_SHADER_CHECKS=none SCELLIS_WEBGPU=dawn timeout 60 $K --sections matmul --sizes 4096,8192 --dtypes f16 --tier prod --no-torch 2>&1 | grep matmul
  echo "-- unchecked device, sgm designs"
  timeout 120 python3 benchmarks/sgm_designs.py --unchecked
fi
date -u
