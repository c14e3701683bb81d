#!/usr/bin/env bash
# The GPU suite: on a machine with an NVIDIA GPU, every numeric test and program on the GPU
# against the CPU path and PyTorch. Ends with `N passed, N failed`.
#
#   tools/gpu/suite.sh BIN_DIR [OUT_DIR]
#
# BIN_DIR holds tsr, tsrc, tsr-eval, schedule_check, tsr-run-bundle and tsr-onnx-test built for this machine's
# processor (or their .xz), bundles of examples/train_regression.tsr for the cuda and cpu targets,
# and ONNX's backend test data (onnx-testdata.tar.xz, where the host has no
# /usr/share/libonnx-testdata): a GPU host without LLVM gets them made elsewhere
# (tools/gpu/pack.sh). OUT_DIR
# (default: a temporary folder) receives each step's log. Needs python3 with torch and numpy.
#
# Steps (each PASS or FAIL with its log's last lines):
#   gpu_info          the driver sees a GPU (a failure here fails everything after it)
#   run_programs      tests/run on --device cuda: the same output and exit codes as the CPU's
#   tile_kernels_gpu  the spec's and the stdlib's @kernels launched on the GPU, checked by their own
#                     asserts against graph-level references
#   examples_gpu      every examples/ program (the spec's examples) on the GPU and the CPU: same output
#   flash_attention   the attention loop on the tensor cores (Hopper) and nn.flash_attention's forward
#                     and gradients against the f32 graph-level attention, ragged and causal
#   cuda_graphs       CUDA-graph replay (TSR_CUDA_GRAPHS=1): KV-cache decoding with generate.tsr's
#                     cached_step is captured, gives the same tokens as without graphs at batch 1
#                     and 8 (rates printed), a broken copy-in gives other tokens, --profile captures
#                     nothing (tests/gpu/cuda_graphs.py)
#   mma_matmul        tensor-core matrix products (hand-written and graph; ragged, transposed,
#                     batched) against the CUDA-core path
#   autotune_matmul_gpu  a graph's bf16 product under --autotune=full times the tensor cores' tile
#                     candidates (128x256x64, 128x128x64) and records the fastest; a second process
#                     times nothing; another shape is tuned anew; values agree with --autotune=off
#                     (tests/autotune/matmul_tiles.py --device cuda)
#   debug_checks      --debug on the GPU: index checks in the kernels' PTX (exit 1 naming the tensor,
#                     index, extent and line) and the NaN/Inf sentinel after graph steps
#   deterministic_gpu --deterministic on the GPU: two runs of tests/determinism/atomic_sum.tsr
#                     (4,096 programs adding floats with tile.atomic_add) write the same bytes; the
#                     runs without the flag are reported (they may differ; agreeing is no failure)
#   device_oom        a graph output larger than the GPU: exit 3, the bytes and the op's line
#   bundle_gpu        a cuda bundle runs from an empty folder on the GPU with its own PTX; a cpu-only
#                     bundle is refused there (bundle_cpu_refused)
#   bundle_runner_gpu tsr-run-bundle (no compiler linked) runs a traced cuda bundle on the GPU;
#                     with a bundle made without --trace it names the program it lacks (bundle_runner_missing)
#   hgmma_sass        the Hopper tensor-core products' machine code has HGMMA (wgmma); sm_80's none
#   graph_eval_gpu    the 592 PyTorch cases of graph_eval, each graph compiled for the GPU
#   compiled_vs_ref   every test graph at odd, unit and power-of-two sizes and every dtype on the GPU
#                     against the reference evaluator
#   kernel_views_gpu  the flash kernels read the heads' strided views of a fused projection in place
#                     (tests/nn/kernel_views.py: only written operands copied at their launches; values and
#                     gradients against the f32 attention); negative_kernel_views_gpu: TSR_KERNEL_VIEWS=0 must fail
#   epilogue_gpu      products with epilogues (bias, residual, GELU; on the tensor cores and as GEMV) under each
#                     TSR_EPILOGUE rule against the evaluator; negative_epilogue_gpu: the product stored in their place
#   split_k_gpu       split-K products (forced into 3 parts: tensor-core and CUDA-core ones) on the GPU
#                     against the reference evaluator; negative_split_k_gpu: a sum that leaves out a part differs
#   argmax_gpu        argmax and argmin as reduce programs (tests/schedule/argmax.graph: ties, NaN, inf,
#                     long rows, seven dtypes, views) on the GPU against the reference evaluator; its
#                     control negative_argmax_gpu takes the last of equal elements (TSR_ARGMAX_TEST_BREAK)
#                     and must fail
#   gemv_gpu          GEMV programs of products of at most 8 rows (tests/schedule/gemv_check.py: ragged
#                     sizes, four float dtypes, both layouts) on the GPU against the reference evaluator;
#                     negative_gemv_gpu: the loop skipping K's first chunk (TSR_GEMV_TEST_BREAK) must fail
#   autodiff_gpu      gradients of every op on the GPU against torch.autograd and finite differences
#   onnx_ort_examples every examples/ graph function that `tsrc --emit=onnx` exports (and
#                     tests/onnx/ort_fixture.tsr's), run by ONNX Runtime (CPU provider, and CUDA where
#                     the installed onnxruntime has it) against `tsr run --device cuda` (issue 19;
#                     tests/onnx/ort_examples.py); its control negative_onnx_ort_examples turns each
#                     model's first Add into a Sub (gemm's reference: its output negated): all fail.
#   onnx_backend_gpu  ONNX's backend tests (issue 19): each model imported and run by the compiled
#                     executor on the GPU (tools/onnx/backend_test.sh --device cuda), the per-category
#                     lines, no regression against tools/onnx/passing-compiled.txt (the CPU compiled
#                     executor's passes); its control negative_onnx_backend_gpu lists a test that
#                     cannot pass (the string cast): one regression; onnx_argmax_gpu: the ArgMax,
#                     ArgMin, Hardmax and TopK tests alone, all 42 passing with no library step
#   conv_torch_cuda   convolution and pooling (1-3 d, strides, pads, dilation, groups, transposed,
#                     max/avg/global pools; 26 cases, f32 and f64) and their gradients on the GPU's
#                     window programs (ir/schedule/LowerWindow.cpp) against torch.nn.functional and
#                     torch.autograd, the profile showing window programs and no library step of them;
#                     its control negative_conv_torch_cuda alters PyTorch's side: all 52 cases fail
#   window_dtypes_cuda the window programs in bf16, f16, f32 and i32, i64, i8 on the GPU against the
#                     reference evaluator (tests/nn/window_dtypes.py); its control
#                     negative_window_dtypes_cuda changes the GPU run's weight: all six differ
#   digits_vit        the main job on the GPU and on the CPU: accuracy and time side by side; a
#                     second GPU run reads every program from the compilation cache (0 misses)
#   gpu_ops_bench     tools/bench/gpu/ops.sh: GEMM, layer_norm, rms_norm, softmax (row steps and multi-step) against PyTorch (figures)
#   launch_overhead   µs per one-op graph call against PyTorch eager's `x + 1` (a figure, no limit)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:?usage: tools/gpu/suite.sh BIN_DIR [OUT_DIR]}
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
BIN=$(cd "$BIN" && pwd)
for b in tsr tsrc tsr-eval schedule_check tsr-run-bundle tsr-onnx-test; do
  if [[ ! -x "$BIN/$b" && -f "$BIN/$b.xz" ]]; then xz -dc "$BIN/$b.xz" >"$BIN/$b" && chmod +x "$BIN/$b"; fi
  [[ -x "$BIN/$b" ]] || { echo "suite: $BIN/$b is missing"; echo "0 passed, 1 failed"; exit 1; }
done
# Shared libraries the binaries link that a GPU host may lack (ONNX and Protobuf, for the ONNX
# importer): pack.sh ships them in BIN/lib.
if [[ -d "$BIN/lib" ]]; then
  for l in "$BIN"/lib/*.xz; do [[ -f "$l" && ! -f "${l%.xz}" ]] && xz -dc "$l" >"${l%.xz}"; done
  export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export TSR_REQUIRE_PREREQS=1
# Cases of the Python tests run this many at a time (each its own process and CUDA context).
export TSR_TEST_JOBS=${TSR_TEST_JOBS:-8}
# A fresh compilation cache: the first runs compile cold, digits_vit_cuda_warm must compile nothing.
export TSR_CACHE_DIR="$OUT/cache"
rm -rf "$TSR_CACHE_DIR"
passed=0 failed=0
# SUITE_ONLY="name name...": run only those steps (gpu_info always runs).
step() {
  local name=$1; shift
  if [[ -n "${SUITE_ONLY:-}" && $name != gpu_info && " $SUITE_ONLY " != *" $name "* ]]; then return 0; fi
  echo "== $name"
  local t0=$SECONDS
  # Each step under a time limit (STEP_TIMEOUT seconds, default 1200): a hang is a failure.
  if timeout "${STEP_TIMEOUT:-1200}" bash -c "$*" >"$OUT/$name.log" 2>&1; then
    passed=$((passed + 1)); echo "PASS $name ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); echo "FAIL $name ($((SECONDS - t0)) s); its last lines:"; tail -n 25 "$OUT/$name.log"
  fi
  grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/$name.log" | tail -n 1 | sed 's/^/   /'
}

step gpu_info "nvidia-smi -L; '$BIN/tsr' run tools/bench/gpu/launch_overhead.tsr --device cuda --n 10"
if [[ $failed -ne 0 ]]; then echo "$passed passed, $failed failed"; exit 1; fi
step run_programs "python3 tests/run/run_programs.py '$BIN/tsr' --device cuda"
step tile_kernels_gpu "python3 tests/tile/run_kernels.py '$BIN/tsr' --device cuda examples/saxpy.tsr examples/gemm.tsr examples/flash_attention.tsr tests/tile/programs/stdlib_kernels.tsr tests/tile/programs/tile_ops.tsr"
step examples_gpu "python3 tools/gpu/compare_examples.py '$BIN/tsr' examples/saxpy.tsr examples/gemm.tsr examples/flash_attention.tsr examples/train_regression.tsr examples/transformer_block.tsr"
step flash_attention "python3 tests/expect.py --exit 0 --has 'flash_attention ok' -- '$BIN/tsr' run tests/gpu/flash_attention.tsr --device cuda"
step cuda_graphs "python3 tests/gpu/cuda_graphs.py '$BIN/tsr'"
step mma_matmul "python3 tests/expect.py --exit 0 --has 'mma_matmul ok' -- '$BIN/tsr' run tests/gpu/mma_matmul.tsr --device cuda"
step autotune_matmul_gpu "python3 tests/autotune/matmul_tiles.py '$BIN/tsr' '$BIN/tsrc' '$BIN/tsr-run-bundle' --device cuda"
# Debug mode (--debug) on the device: a correct kernel passes its index checks; an index outside
# its axis is exit 1 at the load with the tensor, the index and the extent; a NaN is exit 1 at the
# op that made it.
step debug_checks "set -e; python3 tests/expect.py --exit 0 --has 'debug_checks ok' -- '$BIN/tsr' run tests/gpu/debug_checks.tsr --device cuda --debug --case 0; python3 tests/expect.py --exit 1 --has 'debug_checks.tsr:12:9: error: index out of bounds in kernel .shift_rows.: load of .x. at index (6[4-9]|7[01]) along axis 0, whose extent is 64' -- '$BIN/tsr' run tests/gpu/debug_checks.tsr --device cuda --debug --case 1; python3 tests/expect.py --exit 1 --has 'debug_checks.tsr:17:12: error: NaN produced by .sqrt.' -- '$BIN/tsr' run tests/gpu/debug_checks.tsr --device cuda --debug --case 2"
# Deterministic mode (--deterministic): kernels' float atomics in program order (the ticket of
# codegen/llvm/OrderedAtomics.cpp), so two runs give the same bytes.
step deterministic_gpu "python3 tests/determinism/deterministic.py '$BIN/tsr' --device cuda"
step device_oom "python3 tests/expect.py --exit 3 --has 'out of memory' --has 'device_oom.tsr:6' -- '$BIN/tsr' run tests/gpu/device_oom.tsr --device cuda"
# Bundles made where the compiler is (tools/gpu/pack.sh puts them in BIN_DIR): the cuda one runs
# from an empty folder on the GPU with its own code; the cpu-only one is refused there with both
# names.
B=$(mktemp -d)
cp "$BIN"/*.bundle "$B"/ 2>/dev/null
step bundle_gpu "cd '$B' && TSR_BUNDLE_VERBOSE=1 python3 '$PWD/tests/expect.py' --exit 0 --has 'final loss' --has 'tsr: bundle: [1-9][0-9]* programs from the bundle' -- '$BIN/tsr' run train_regression.cuda.bundle --device cuda"
# The runner without a compiler (no LLVM in the binary): every program from the traced bundle.
step bundle_runner_gpu "cd '$B' && TSR_BUNDLE_VERBOSE=1 python3 '$PWD/tests/expect.py' --exit 0 --has 'final loss' --has 'tsr: bundle: [1-9][0-9]* programs from the bundle, 0 compiled here' -- '$BIN/tsr-run-bundle' train_regression.traced.cuda.bundle --device cuda"
# The same runner with a bundle made without --trace: a program it lacks is named, exit 3.
step bundle_runner_missing "cd '$B' && python3 '$PWD/tests/expect.py' --exit 3 --has 'is not in the bundle for cuda:0, and this runner compiles nothing' -- '$BIN/tsr-run-bundle' train_regression.cuda.bundle --device cuda"
step bundle_cpu_refused "cd '$B' && python3 '$PWD/tests/expect.py' --exit 3 --has 'the bundle has code for the cpu only; the device is cuda:0' -- '$BIN/tsr' run train_regression.cpu.bundle --device cuda"
# Hopper's matrix instructions in the machine code: the sm_90 (sm_90a) PTX of the tensor-core
# products assembled, and cuobjdump's SASS of them has HGMMA (wgmma); the sm_80 PTX has none.
step hgmma_sass "set -e; '$BIN/tsrc' tests/gpu/mma_matmul.tsr --emit=ptx --arch sm_90 > '$OUT/mma90.ptx'; ptxas -arch=sm_90a '$OUT/mma90.ptx' -o '$OUT/mma90.cubin'; n=\$(cuobjdump -sass '$OUT/mma90.cubin' | grep -c HGMMA); echo \"HGMMA instructions: \$n\"; test \$n -gt 0; '$BIN/tsrc' tests/gpu/mma_matmul.tsr --emit=ptx --arch sm_80 > '$OUT/mma80.ptx'; ptxas -arch=sm_80 '$OUT/mma80.ptx' -o '$OUT/mma80.cubin'; m=\$(cuobjdump -sass '$OUT/mma80.cubin' | grep -c HGMMA || true); echo \"sm_80 HGMMA: \$m\"; test \$m -eq 0"
step graph_eval_gpu "TSR_EXECUTOR=compiled TSR_DEVICE=cuda python3 tests/ir/test_eval.py '$BIN/tsr-eval' '$BIN/tsrc'"
step compiled_vs_ref "python3 tests/schedule/run_schedule_tests.py '$BIN/tsrc' '$BIN/schedule_check' '$PWD' --device cuda --min-graphs 49"
step kernel_views_gpu "python3 tests/nn/kernel_views.py '$BIN/tsr' --device cuda"
step negative_kernel_views_gpu "python3 tests/expect.py --has 'FAIL: flash_attention_fwd: 5 copies per launch' --has 'kernel_views: FAILED' -- python3 tests/nn/kernel_views.py '$BIN/tsr' --device cuda --negative"
step epilogue_gpu "python3 tests/schedule/epilogue_check.py '$BIN/tsrc' '$BIN/schedule_check' '$PWD' --device cuda"
step negative_epilogue_gpu "TSR_EPILOGUE_TEST_BREAK=1 python3 tests/expect.py --exit 1 --has 'compiled results differ from the evaluator' -- python3 tests/schedule/epilogue_check.py '$BIN/tsrc' '$BIN/schedule_check' '$PWD' --device cuda"
step split_k_gpu "python3 tests/schedule/split_k.py '$BIN/schedule_check' '$PWD' --device cuda"
step negative_split_k_gpu "TSR_SPLIT_K_TEST_BREAK=sum python3 tests/expect.py --exit 1 --has 'the compiled split products differ' -- python3 tests/schedule/split_k.py '$BIN/schedule_check' '$PWD' --device cuda"
step argmax_gpu "python3 tests/expect.py --exit 0 --has '^7 passed, 0 failed' --has 'totals: .* 4 library' -- '$BIN/schedule_check' --device cuda tests/schedule/argmax.graph"
step negative_argmax_gpu "TSR_ARGMAX_TEST_BREAK=ties python3 tests/expect.py --has 'FAIL .*argmax.graph @arg_ties_nan_inf .*: output 0:' -- '$BIN/schedule_check' --device cuda tests/schedule/argmax.graph"
step gemv_gpu "python3 tests/schedule/gemv_check.py '$BIN/schedule_check' '$PWD' --device cuda"
step negative_gemv_gpu "TSR_GEMV_TEST_BREAK=1 python3 tests/expect.py --exit 1 --has 'schedule_check against the evaluator' -- python3 tests/schedule/gemv_check.py '$BIN/schedule_check' '$PWD' --device cuda"
step autodiff_gpu "TSR_EXECUTOR=compiled TSR_DEVICE=cuda python3 tests/autodiff/test_grad.py '$BIN/tsr-eval' '$BIN/tsrc'"
# ONNX export (issue 19): ONNX Runtime runs each exported examples/ function with Tessera's outputs.
ORT_EXAMPLES="python3 tests/onnx/ort_examples.py '$BIN/tsr' '$BIN/tsrc' --device cuda --also tests/onnx/ort_fixture.tsr"
step onnx_ort_examples "python3 tests/expect.py --exit 0 --has '^PASS examples/gemm.tsr:reference ' --has '^PASS tests/onnx/ort_fixture.tsr:mlp2 ' --has '^[0-9]+ passed, 0 failed, [0-9]+ skipped' -- $ORT_EXAMPLES"
step negative_onnx_ort_examples "python3 tests/expect.py --exit 1 --has '^FAIL examples/gemm.tsr:reference .*control: ' --has '^FAIL tests/onnx/ort_fixture.tsr:mlp2 .*control: first Add -> Sub' --has '^0 passed, [1-9][0-9]* failed, [0-9]+ skipped' -- $ORT_EXAMPLES --negative"
# ONNX's backend tests on the GPU: the host's libonnx-testdata, else the copy pack.sh ships.
ONNX_DATA=/usr/share/libonnx-testdata/data
if [[ ! -d $ONNX_DATA && -f "$BIN/onnx-testdata.tar.xz" ]]; then
  mkdir -p "$OUT/onnx-testdata" && tar xJf "$BIN/onnx-testdata.tar.xz" -C "$OUT/onnx-testdata" && ONNX_DATA="$OUT/onnx-testdata/data"
fi
ONNX_BACKEND="tools/onnx/backend_test.sh '$ONNX_DATA' --device cuda --tool '$BIN/tsr-onnx-test'"
# (exit 1 on a regression: a test of passing-compiled.txt that does not pass; the log keeps the
# per-category lines, the verdicts file every test's line)
step onnx_backend_gpu "$ONNX_BACKEND --log '$OUT/onnx_backend_gpu.verdicts'"
step negative_onnx_backend_gpu "python3 tests/expect.py --exit 1 --has 'REGRESSIONS .*: 1' --has 'node/test_cast_FLOAT_to_STRING' --has 'node: 1 passed, 0 failed, 1 unsupported' -- $ONNX_BACKEND --match 'test_(abs|cast_FLOAT_to_STRING)\$' --passing tests/onnx/negative_passing.txt"
step onnx_argmax_gpu "python3 tests/expect.py --exit 0 --has 'total: 42 passed, 0 failed' --has 'compiled executor: .* 0 interpreted, 0 with unknown dims, 0 library' -- $ONNX_BACKEND --match 'test_(argmax|argmin|hardmax|top_k)'"
[[ -f "$OUT/onnx_backend_gpu.log" ]] && grep -hE '^(node|pytorch-converted|pytorch-operator|simple|total|compiled executor):' "$OUT/onnx_backend_gpu.log" | sed 's/^/   /'
# Convolution and pooling as the GPU's window programs, values and gradients against PyTorch.
step conv_torch_cuda "python3 tests/nn/conv_torch.py '$BIN/tsr' --device cuda"
step negative_conv_torch_cuda "python3 tests/expect.py --exit 1 --has 'negative: 52 of 52 cases failed' -- python3 tests/nn/conv_torch.py '$BIN/tsr' --device cuda --negative"
step window_dtypes_cuda "python3 tests/nn/window_dtypes.py '$BIN/tsr' --device cuda"
step negative_window_dtypes_cuda "python3 tests/expect.py --exit 1 --has 'negative: 6 of 6 dtypes differ' -- python3 tests/nn/window_dtypes.py '$BIN/tsr' --device cuda --negative"

# The main job on both devices (the CPU with every core of this machine).
epochs=${DIGITS_EPOCHS:-30}
step digits_vit_cuda "'$BIN/tsr' run examples/digits_vit.tsr --device cuda --epochs $epochs --out '$OUT/digits_cuda.svg'"
step digits_vit_cuda_warm "TSR_CACHE_STATS=1 python3 tests/expect.py --exit 0 --has ' 0 misses' --has 'final test accuracy' -- '$BIN/tsr' run examples/digits_vit.tsr --device cuda --epochs $epochs --out '$OUT/digits_cuda_warm.svg'"
step digits_vit_cpu "'$BIN/tsr' run examples/digits_vit.tsr --device cpu --epochs $epochs --out '$OUT/digits_cpu.svg'"
for d in cuda cuda_warm cpu; do
  [[ -f "$OUT/digits_vit_$d.log" ]] && echo "   digits_vit $d: $(grep -h 'final test accuracy' "$OUT/digits_vit_$d.log" | tail -n 1)"
done

step gpu_ops_bench "tools/bench/gpu/ops.sh '$BIN/tsr'"
[[ -f "$OUT/gpu_ops_bench.log" ]] && sed 's/^/   /' "$OUT/gpu_ops_bench.log"
step launch_overhead "'$BIN/tsr' run tools/bench/gpu/launch_overhead.tsr --device cuda --n 20000 && python3 tools/bench/gpu/launch_overhead.py 20000"
[[ -f "$OUT/launch_overhead.log" ]] && grep -h "us per" "$OUT/launch_overhead.log" | sed 's/^/   /'
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
