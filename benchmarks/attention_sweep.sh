#!/usr/bin/env bash
# Flash-attention kernel variants side by side (one device call): each line of CONFIGS is the
# environment of one variant (kernels/flash_fwd_op.wgsl, flash_bwd_op.wgsl; see
# scellis_jupyter/backends/wgpu/kernels/attention_op.py), run through benchmarks/kernels.py's attention
# section on the L=1k and 4k shapes and the GPT bench's B64 H6 L256 (f32; torch beside only the first
# variant; the first B64 H6 L256 rows are a warm-up, its second rows are the ones to read).
# Usage: bash benchmarks/attention_sweep.sh [OUTDIR]   (prints the tables; one log per variant in OUTDIR)
set -u
out=${1:-/tmp/attention_sweep}
mkdir -p "$out"
shapes=${SWEEP_SHAPES:-64x6x256x64,4x16x1024x64,2x16x4096x64,64x6x256x64}   # the first: warm-up (clocks), read the last
CONFIGS=(
  "base|"
  "op|SCELLIS_ATTENTION_FWD=op SCELLIS_ATTENTION_BWD=op"
  "op-nosg|SCELLIS_ATTENTION_FWD=op SCELLIS_ATTENTION_BWD=op SCELLIS_ATTENTION_SG=off"
  "op-w128|SCELLIS_ATTENTION_FWD=op:1x1x16 SCELLIS_ATTENTION_DKDV=op:1x1x8 SCELLIS_ATTENTION_DQ=op:2x1x4"
  "op-small|SCELLIS_ATTENTION_FWD=op:2x1x4 SCELLIS_ATTENTION_BWD=op:1x1x4"
  "op-dq-tiled|SCELLIS_ATTENTION_FWD=op SCELLIS_ATTENTION_DKDV=op"
)
first=1
for c in "${CONFIGS[@]}"; do
  name=${c%%|*}
  envs=${c#*|}
  torch=--no-torch
  if [ $first = 1 ]; then torch=""; first=0; fi
  echo "=== $name: $envs"
  env $envs timeout 90 python3 benchmarks/kernels.py --no-write --sections attention --dtypes f32 \
    --budget 1 --iters 10 --attn-shapes "$shapes" $torch 2>&1 | tee "$out/$name.log" | grep -E "^attention|rror"
done
