#!/usr/bin/env bash
# The test suite: installs what is missing, builds fusetune as it ships (Release: -O3, NDEBUG,
# warnings as errors) and with AddressSanitizer + UndefinedBehaviorSanitizer (Debug: assertions
# on), and runs every test once: in the sanitizer build where it can run there at a bearable cost,
# in the Release build otherwise (the list below), then checks that no test was left out.
# `--quick` builds Release alone and runs every test there. `--tsan` builds with ThreadSanitizer
# (./build-tsan) and runs the tests of what runs on several threads: the coordinator (its loop,
# pools and HTTP threads, against scripted workers), the scheduler, the worker's daemon, compile
# pool and sandbox, the upload ledger, parallel_for, the HTTP limits, the coordinator's fuzz
# corpus and `tune`'s dry run. It is not part of CI's run (a third build does not fit CI's time):
# run it after a change to what threads share.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--tsan" ]; then
  # Left out: the tests whose workers measure real groups on the host executor, which under
  # ThreadSanitizer runs each kernel 20 to 50 times slower than their deadlines allow (the
  # worker's threads are those of WorkerDaemon, CompilePool and Sandbox, which run here).
  tsan_slow='ACoordinatorKilledMidJobResumesAfterRestart|AModelWhoseNodeNamesAreNotUtf8TunesToDoneWithEveryTaskSucceeding|ASigtermedWorker.*|ATaskWhoseLeasesAllDieFailsAtTheAttemptLimitAndItsJobsFinish|ATimedOutCandidateIsMeasuredAgainUpToTheLimit|AWorkerKilledMidJobLosesNothingAndDuplicatesNothing|AWorkerOfSeveralDevicesServesEveryDeviceAndReportsWhatEachDid|CancelReachesTheWorkerWhichStopsMeasuringTheJobsTask|FiftyJobsAtOnceAllCompleteAndModelsSharingBlocksShareTasks|GarbageFramesAndIncompatibleWorkersAreHandledAndTheServiceGoesOn|MeasurementsAnswerOnlyTheirOwnDeviceIdentity|WithCurveKeysOnlyAllowedWorkersAndClientsAreServedEachInItsRole'
  scripts/setup.sh --tsan
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir build-tsan --output-on-failure -j "$(nproc)" \
    -R '^(Service|SchedulerTest|WorkerDaemon|WorkerMachine|CompilePool|Sandbox|UploadsTest|ParallelFor|HttpLimits|Metrics)\.|^FuzzRegressions\.Coordinator|^tune\.no_gpu$' \
    -E "^Service\.($tsan_slow)\$|^Sandbox\.GeneratedCandidatesOfARealGroupVerifyAndTime\$"
  exit 0
fi
scripts/setup.sh
if [ "${1:-}" = "--quick" ]; then
  ctest --test-dir build --output-on-failure -j "$(nproc)"
  exit 0
fi
scripts/setup.sh --sanitize

# What the sanitizer build does not run, and the Release build does. Every unit test and the
# smallest models end to end (cnn_small, nerf_mlp, resnet_small, unet_small, and of the Hugging
# Face ones llama_decode, whose attention GPT-2's groups take under them too) run under the
# sanitizers. Left to Release: what repeats, at several times the
# cost under the sanitizers, code paths those already take: the barrier mutation tests
# (mutations.*), the larger models compiled and run (compiled.*, Codegen/ModelGroups.*), the BERT
# tuning, the three-tune extension run (tune.extend: 133 s under the sanitizers; the Service tests
# take the same coordinator paths) and hand-deleted-barrier runs, the export and launch-order
# checks over whole measured plans (JobPlanner.AnExport*: lowering and NVRTC of every launch, 177 s
# under the sanitizers; Select.EveryLaunchRuns*: 40 plans), the installed package (install.package:
# a deployment built without the sanitizers cannot load an instrumented library), the
# coordinator's latency bound (service.event_loop_latency: its 10 ms are the optimized build's),
# the coordinator under load with three SIGKILLs (service.load_with_kills: 135 s under the
# sanitizers; Service.ACoordinatorKilledMidJob* and Service.AWorkerKilledMidJob* take its paths),
# the race's rehearsal (bench.gpu_perf_rehearse: PyTorch and the CLI steps the CLI tests cover),
# the PTX habit checks of whole plans (Models/PtxHabits.*, Models/PtxIndexing.*, and LLaMA compiled
# under TF32, PtxTensorCores.AFloatThirtyTwoPlanUnderTf32RunsOnTf32TensorCores: the text NVRTC
# compiles is the same in both builds, at 7-43 s a plan under the sanitizers), the 16-byte access shares of two
# float16 plans (WideAccesses.*), the verifier over the larger models' candidates
# (VerifyIr/ModelKernels.*), flash attention on the larger models' attention groups
# (Codegen/ModelAttention.*: GPT-2's runs under the sanitizers), and the executor's sweeps of
# many shapes and tiles whose stages the sanitizers see in the other Codegen*, Wgmma* and
# TensorCore* tests (CodegenConv.StagedConvolutionsOnOddShapesAndTiles,
# CodegenWarp.RowStatisticsOnRowsAroundTheWarpSize, CodegenVector.StagedMatMulsWithQuadsAndTheirFallbacks,
# WgmmaMatMul.ChainsMatchTheReferenceOnEveryTile, TensorCoreMatMul.ChainsMatchTheReferenceOnEveryTile,
# CodegenAttention.FlashMatchesTheReferenceInEveryType beside LongSequencesTakeTheFlashForm,
# CodegenGemv.OddShapesMatchTheReferenceInEveryType beside the fused GEMV test,
# RegisterEpilogue.MatchesTheReferenceAndNeedsOnlyTheOperandRing beside the 16-bit fragments' test,
# GroupFuzz.TheKeptSeedsStillPass beside the two random campaigns: 40-90 s each under the
# sanitizers), the split-K planner's enumeration of 100,000 candidates
# (SplitKPlanner.SkinnyProjections*: 54 s there; SplitK.* runs its kernels under them), the
# deployment runtime's threads (RuntimeApi.SeveralThreads*: 50 s there, the runs of the host
# executor; RuntimeApi.RunsOnCallersMemory* takes its paths under them, and a race is
# ThreadSanitizer's to find, not AddressSanitizer's), the
# dashboard's HTTP checks beside a browser (cli.dashboard: 67 s there; the Service tests take the
# coordinator's paths and HttpLimits its HTTP server's), what NVRTC's own work is most of (CodegenConv.TopCandidatesOfTheModelsCompileWithoutSpills:
# NVRTC is not instrumented; compiled.gpt2 beside GPT-2's groups), and the TF32 dry-run tuning (tune.no_gpu_tf32: 68 s there; tune.no_gpu tunes under
# the sanitizers, TensorCoreMatMul.FloatThirtyTwoChains* runs TF32). The conformance cases run
# compiled (onnx_conformance_compiled_1_23: 45 plans compiled and verified on the host; the quantized
# models' compiled.* take the same lowering and code paths under the sanitizers). The Python package
# (python.runtime) is not built with them.
larger='(bert|bert_dynamic|convnext_t|efficientnet_b0|mobilenet_v2|swin_t|vit|llama|llama_gqa|qwen2|qwen2_decode|bart_encoder|distilbert|hf_vit|t5_encoder|whisper_encoder|[a-z0-9_]+_dynamo|[a-z0-9_]+_fp16)'
skip="^mutations\\.|^compiled\\.${larger}\$|^(Codegen/ModelGroups|Codegen/ModelAttention|VerifyIr/ModelKernels)\\..*\"${larger}\"\$|^tune\\.bert\$|^tune\\.extend\$|^cli\\.deleted_barrier\$|^JobPlanner\\.AnExport|^Select\\.EveryLaunchRuns|^install\\.package\$|^service\\.event_loop_latency\$|^service\\.load_with_kills\$|^bench\\.gpu_perf_rehearse\$|^Models/Ptx|^PtxTensorCores\\.AFloatThirtyTwoPlanUnderTf32RunsOnTf32TensorCores\$|^WideAccesses\\.|^CodegenConv\\.StagedConvolutionsOnOddShapesAndTiles\$|^CodegenWarp\\.RowStatisticsOnRowsAroundTheWarpSize\$|^CodegenVector\\.StagedMatMulsWithQuadsAndTheirFallbacks\$|^WgmmaMatMul\\.ChainsMatchTheReferenceOnEveryTile\$|^TensorCoreMatMul\\.ChainsMatchTheReferenceOnEveryTile\$|^CodegenAttention\\.FlashMatchesTheReferenceInEveryType\$|^CodegenGemv\\.OddShapesMatchTheReferenceInEveryType\$|^RegisterEpilogue\\.MatchesTheReferenceAndNeedsOnlyTheOperandRing\$|^GroupFuzz\\.TheKeptSeedsStillPass\$|^tune\\.no_gpu_tf32\$|^CodegenConv\\.TopCandidatesOfTheModelsCompileWithoutSpills\$|^compiled\\.gpt2\$|^TrafficModel\\.|^SplitKPlanner\\.SkinnyProjectionsGetSplitCandidatesThatModelFasterAndLargeOnesNone\$|^cli\\.dashboard\$|^RuntimeApi\\.SeveralThreadsRunSeveralPlansAndShareOne\$|^onnx_conformance_compiled_1_23\$"

# Test names as ctest lists them, one a line.
names() { ctest --test-dir "$1" -N "${@:2}" | sed -nE 's/^ *Test +#[0-9]+: (.*)$/\1/p' | sort; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
names build-asan -E "$skip" > "$work/sanitized"
names build > "$work/all"
comm -23 "$work/all" "$work/sanitized" > "$work/release"
# An anchored alternation of the Release build's share, its names' regex characters escaped.
release_regex="^($(sed 's/[][\\.*^$+?(){}|]/\\&/g' "$work/release" | paste -sd'|'))\$"
echo "test.sh: $(wc -l < "$work/release") tests in the Release build, $(wc -l < "$work/sanitized") under the sanitizers"
ctest --test-dir build --output-on-failure -j "$(nproc)" -R "$release_regex"
# intercept_tls_get_addr=0: GCC 12's LeakSanitizer scans the dynamic TLS blocks it recorded from
# __tls_get_addr, and under glibc 2.36 it may record one with a bogus range
# (LSAN_OPTIONS=log_threads=1 showed "DTLS 15 at 0x000000002338-0x00200000343a"): its
# stop-the-world tracer then faults reading it at the process's exit ("Tracer caught signal 11:
# addr=0x2338", "LeakSanitizer has encountered a fatal error") after the test passed, every time
# for some tests under ctest. Without the interception the dynamic TLS blocks are not scanned;
# every thread's stack and static TLS still are.
ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -E "$skip"
# Every test of the Release build ran in one of the two passes.
missing=$(comm -23 "$work/all" <(sort -u "$work/release" "$work/sanitized"))
if [ -n "$missing" ]; then
  echo "test.sh: these tests ran in neither pass:"
  echo "$missing"
  exit 1
fi
