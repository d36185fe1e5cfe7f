#!/bin/sh
# The installed package as a deployment uses it: `cmake --install` the build into a fresh prefix,
# configure examples/deploy on its own against that prefix (find_package(fusetune)), build it,
# and run a plan compiled by the installed fusetune with the installed runtime library.
# usage: install_package.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -eu
src=$1 build=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in bin/fusetune include/fusetune/runtime.h lib/cmake/fusetune/fusetuneConfig.cmake \
         lib/cmake/fusetune/fusetuneConfigVersion.cmake share/fusetune/systemd/fusetune-worker@.service share/fusetune/systemd/fusetune-worker.service \
         share/fusetune/slurm/fusetune-workers.sbatch; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f was not installed"; cat "$work/install.log"; exit 1; }
done
lib=$(ls "$prefix"/lib*/libfusetune_runtime.so* 2>/dev/null | head -n 1)
[ -n "$lib" ] || { echo "FAIL: libfusetune_runtime.so was not installed"; exit 1; }
# Only the public API leaves the library: no symbol of fusetune's internals (its Graph, planner,
# SQLite or protobuf) is exported.
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt)
echo "$exported" | grep -q 'fusetune::Plan::load' || { echo "FAIL: Plan::load is not exported"; exit 1; }
if echo "$exported" | grep -E 'fusetune::(Graph|planner|codegen|simt|backend)|sqlite3_|google::protobuf' | head -n 3 | grep -q .; then
  echo "FAIL: internal symbols are exported:"
  echo "$exported" | grep -E 'fusetune::(Graph|planner|codegen|simt|backend)|sqlite3_|google::protobuf' | head -n 5
  exit 1
fi
# The runtime library only runs plans: no planner, code generator, SIMT executor or reference
# interpreter inside (its own symbol table, not only its exports); the host backend is the plugin
# installed beside it.
[ -e "$(dirname "$lib")/libfusetune_host.so.0" ] || { echo "FAIL: the host backend's plugin was not installed beside $lib"; exit 1; }
inside=$(nm -C "$lib" | grep -E 'fusetune::(codegen|simt|reference|importer|search)::|fusetune::planner::(fuse|plan_model|tile_candidates|evaluate_tile|match_)' | head -n 5)
if [ -n "$inside" ]; then
  echo "FAIL: the runtime library holds compiler code:"
  echo "$inside"
  exit 1
fi
# NVRTC is opened at run time where something must be compiled: neither the runtime library nor
# the CLI links it, so both load on a host with the GPU driver alone.
for f in "$lib" "$prefix/bin/fusetune"; do
  needed=$(readelf -d "$f" | awk '/\(NEEDED\)/ {print $5}')
  if echo "$needed" | grep -q nvrtc; then
    echo "FAIL: $f links NVRTC:"
    echo "$needed"
    exit 1
  fi
done
cmake -S "$src/examples/deploy" -B "$work/deploy-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log"
cmake --build "$work/deploy-build" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$prefix/bin/fusetune" compile "$src/tests/data/models/nerf_mlp/model.onnx" --device h100 --out "$work/plan" > /dev/null
"$work/deploy-build/deploy_example" "$work/plan" --backend host > "$work/run.log"
cat "$work/run.log"
grep -q 'output rgb .* checksum' "$work/run.log" || { echo "FAIL: the installed runtime did not run the plan"; exit 1; }
# The runtime library alone, without its plugin: a host run fails with one line naming the plugin.
mkdir -p "$work/alone"
cp "$lib" "$work/alone/$(basename "$lib")"
ln -sf "$(basename "$lib")" "$work/alone/libfusetune_runtime.so.0"
if LD_LIBRARY_PATH="$work/alone" "$work/deploy-build/deploy_example" "$work/plan" --backend host > "$work/alone.log" 2>&1; then
  echo "FAIL: the runtime ran a plan on the host without its plugin"
  exit 1
fi
grep -q 'libfusetune_host.so.0 could not be loaded' "$work/alone.log" || { echo "FAIL: no line names the missing plugin:"; cat "$work/alone.log"; exit 1; }
echo "PASS: installed to $prefix; examples/deploy built against it with find_package(fusetune) and ran a plan; without its plugin the runtime said so"
