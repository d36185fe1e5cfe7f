// The CUDA backend: generated kernels compiled with NVRTC for the device's architecture, loaded
// with cuModuleLoadData and launched with cuLaunchKernel, or on sm_90+ with cuLaunchKernelEx and
// programmatic stream serialization (a kernel begins launching while the one before it finishes
// and waits for it in its first statement; FUSETUNE_PDL=0 turns it off); time() flushes the L2 (by writing a
// buffer twice its size) before each timed launch and times with device events. The flush buffer
// is allocated by the first timed run and the library calls' 32 MB workspace by the first module
// with a library call, so a deployment that does neither allocates neither; events are released
// however a timed run ends. A prepared
// sequence (Module::prepare) is captured once into a CUDA graph and replayed, or launched kernel by
// kernel where the capture fails; bound buffers (Sequence::bind) update the graph in place, and a
// run's host transfers go through pinned staging, asynchronously on the sequence's stream. The
// backend holds the device's primary context (retained once, released when it is destroyed, the
// last backend of a device destroying the cuDNN handle made for it first) and makes it current
// for every call of it and its buffers, modules and sequences, restoring the caller's after: any
// thread may use them. Every driver call is checked (in destructors, a failure is one line on
// stderr). The driver is loaded at run time, so the same binary runs on machines without one.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace fusetune::backend {

// The CUDA devices the driver reports; 0 (with the reason in *why_not) without a driver or device.
int cuda_device_count(std::string* why_not);

// Which of a module's PTX texts (by target: "sm_80", "sm_90a") the driver of a GPU of architecture
// `arch` ("sm_100") can compile: the newest plain target at or below the GPU's compute capability
// (PTX runs on later GPUs), or an architecture-specific one ("sm_90a", whose wgmma exists on sm_90
// alone) only on exactly its GPU; "" when none can. A module loads its cubin for the GPU first,
// this PTX second (compiled by the driver: no NVRTC needed), and NVRTC on its CUDA text last.
std::string usable_ptx(const std::map<std::string, std::string>& ptx, const std::string& arch);

// Returns nullptr (with the reason in *why_not) when there is no driver or no such device.
std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why_not);

}  // namespace fusetune::backend
