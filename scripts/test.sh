#!/usr/bin/env bash
# The test suite: installs what is missing, builds, and runs every test with ctest; then the suite
# under AddressSanitizer + UndefinedBehaviorSanitizer, less what it names below. `--quick` skips
# the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
if [ "${1:-}" != "--quick" ]; then
  scripts/setup.sh --sanitize
  # The sanitizer pass runs every unit test and the smallest models end to end (cnn_small,
  # nerf_mlp, resnet_small, and of the Hugging Face ones gpt2 and llama_decode). It leaves out what repeats, at several times the cost under the
  # sanitizers, code paths those already take, and which ran above without them: the barrier
  # mutation tests (mutations.*), the larger models compiled and run (compiled.*,
  # Codegen/ModelGroups.*), the BERT tuning, the three-tune extension run (tune.extend: 133 s under
  # the sanitizers; the Service tests take the same coordinator paths) and hand-deleted-barrier runs, and the export and
  # launch-order checks over whole measured plans (JobPlanner.AnExport*: lowering and NVRTC of
  # every launch, 177 s under the sanitizers; Select.EveryLaunchRuns*: 40 plans), and the installed
  # package (install.package: a deployment built without the sanitizers cannot load an instrumented
  # library; the plain pass runs it), and the coordinator's latency bound (service.event_loop_latency:
  # its 10 ms are the optimized build's; its paths are the other Service tests'), and the coordinator
  # under load with three SIGKILLs (service.load_with_kills: 8 workers and 300 tasks, 135 s under the
  # sanitizers; Service.ACoordinatorKilledMidJob* and Service.AWorkerKilledMidJob* take its paths),
  # and the race's rehearsal (bench.gpu_perf_rehearse: PyTorch
  # and fusetune's CLI steps, which the CLI tests above cover under the sanitizers), and the PTX
  # habit checks (Models/PtxHabits.*, Models/PtxIndexing.*: they read the text NVRTC compiles, the
  # same in both builds, at 7-37 s a plan under the sanitizers), and the 16-byte access shares of
  # two float16 plans (WideAccesses.*: the same counts in both builds; the executor's and the
  # code generator's unit tests cover their paths here), and the verifier's run over the larger
  # models' candidates (VerifyIr/ModelKernels.*: 630 s of the pass at -O0; the small models' run
  # here), and flash attention on the larger models' attention groups (Codegen/ModelAttention.*:
  # GPT-2's runs here, CodegenAttention.* the stage's paths). The executor's own tests (Simt*) run here too.
  larger='(bert|convnext_t|efficientnet_b0|mobilenet_v2|swin_t|vit|llama|llama_gqa|qwen2|qwen2_decode|bart_encoder|distilbert|hf_vit|t5_encoder|whisper_encoder|[a-z0-9_]+_dynamo|[a-z0-9_]+_fp16)'
  skip="^mutations\\.|^compiled\\.${larger}\$|^(Codegen/ModelGroups|Codegen/ModelAttention|VerifyIr/ModelKernels)\\..*\"${larger}\"\$|^tune\\.bert\$|^tune\\.extend\$|^cli\\.deleted_barrier\$|^JobPlanner\\.AnExport|^Select\\.EveryLaunchRuns|^install\\.package\$|^service\\.event_loop_latency\$|^service\\.load_with_kills\$|^bench\\.gpu_perf_rehearse\$|^Models/Ptx|^WideAccesses\\."
  echo "test.sh: the sanitizer pass skips the tests matching ${skip} (run above without sanitizers)"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -E "$skip"

fi
