#!/usr/bin/env bash
# The GPU checks of LapSum and SWAN (issue 25), as one prepared run for a lent CUDA machine:
# the `gpu` tests (Triton kernels against the torch path, CUDA inputs), then both benchmarks on
# CUDA. Writes everything under ${OUT:-gpu_out}/ for docs/lapsum.md and docs/swan.md.
# Run from the repository root: bash benchmarks/gpu_lapsum_swan.sh
set -uo pipefail
out="${OUT:-gpu_out}"
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python -m pip install -q -e ".[gpu,bench]" > "$out/install.txt" 2>&1
python -m pytest -q -m gpu tests/lapsum tests/swan -p no:cacheprovider > "$out/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?" >> "$out/gpu_tests.txt"
timeout 300 python benchmarks/lapsum_bench.py --device cuda > "$out/lapsum_bench_cuda.txt" 2>&1
timeout 300 python benchmarks/swan_bench.py --device cuda > "$out/swan_bench_cuda.txt" 2>&1
tail -n 5 "$out"/*.txt
