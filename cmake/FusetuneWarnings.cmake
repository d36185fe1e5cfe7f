# Warning, sanitizer and code-layout flags shared by every fusetune target.
add_library(fusetune_flags INTERFACE)
target_compile_options(fusetune_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused
  -Woverloaded-virtual -Wimplicit-fallthrough)
# g++ 12 at -O3 (Release) reports -Wrestrict inside <string> for a short literal joined to a
# std::string (GCC bug 105329: a false positive with exabyte sizes at negative offsets; Debian 12's
# compiler has it): off for that compiler only, so every build type compiles cleanly.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(fusetune_flags INTERFACE -Wno-restrict)
endif()
# A unity build (CMAKE_UNITY_BUILD, as scripts/setup.sh configures) compiles each source as a
# header of its batch's file, where GCC takes a class with a member of an anonymous namespace's
# type for one that every file including it would define differently: in a .cpp it is not.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(fusetune_flags INTERFACE -Wno-subobject-linkage)
endif()
# Every function and datum in a section of its own, so that the deployment libraries' links
# (--gc-sections, runtime/CMakeLists.txt) keep only what their entry points reach: the linker
# takes a static library's objects whole, and a unity build's object holds eight sources (the
# runtime library reaches a few functions of the planner's batches, whose other sources are the
# compiler).
target_compile_options(fusetune_flags INTERFACE -ffunction-sections -fdata-sections)
if(FUSETUNE_WERROR)
  target_compile_options(fusetune_flags INTERFACE -Werror)
endif()
if(FUSETUNE_SANITIZE)
  target_compile_options(fusetune_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                  -fno-sanitize-recover=undefined)
  target_link_options(fusetune_flags INTERFACE -fsanitize=address,undefined)
  # The instrumentation misleads GCC's flow analysis: at -O1 it reports -Wmaybe-uninitialized
  # inside libstdc++'s <regex> (GCC documents such false positives under -fsanitize); the plain
  # build keeps the warning.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(fusetune_flags INTERFACE -Wno-maybe-uninitialized)
  endif()
endif()
if(FUSETUNE_TSAN)
  # ThreadSanitizer: the coordinator's loop, pools and HTTP threads, the worker's compile pool and
  # daemon, parallel_for. The SIMT executor tells it of every fiber switch (simt/executor.cpp).
  target_compile_options(fusetune_flags INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(fusetune_flags INTERFACE -fsanitize=thread)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(fusetune_flags INTERFACE -Wno-maybe-uninitialized -Wno-tsan)
  endif()
endif()
if(FUSETUNE_FUZZ)
  # Coverage instrumentation for libFuzzer plus ASan/UBSan in every library, so the fuzz targets
  # (tools/, linked with -fsanitize=fuzzer) see edges and memory errors in all of fusetune.
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FUSETUNE_FUZZ needs clang (configure with CC=clang CXX=clang++)")
  endif()
  target_compile_options(fusetune_flags INTERFACE -fsanitize=fuzzer-no-link,address,undefined
                                                  -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(fusetune_flags INTERFACE -fsanitize=address,undefined)
endif()
