# Where the tests keep fusetune's caches (compiled host kernels, NVRTC's cubins, the default search
# database: core/files.h cache_dir): FUSETUNE_TEST_CACHE_DIR, by default the build tree's
# test-cache/, never the user's ~/.cache, which a test run must leave alone. One folder for all
# tests, so that the host builds of kernels.cu one test made serve the others (a folder a test would
# cost CI's two cores each model's host build again). The sanitizer builds point it at the Release
# build's folder (scripts/setup.sh): a host build of kernels.cu does not depend on how fusetune was
# built (simt/module.cpp keys it by the text, the compiler and its own flags), and `scripts/test.sh
# --full` runs the Release share first, so the sanitizer share finds its kernels built. A fresh
# clone (CI's) starts with the folder empty. A test that needs a cache of its own
# (the race's rehearsal) sets FUSETUNE_CACHE_DIR in its command, which wins.
set(FUSETUNE_TEST_CACHE_DIR "${PROJECT_BINARY_DIR}/test-cache" CACHE PATH
    "Where the tests keep fusetune's caches (host kernel builds, cubins, the default search database)")
set(FUSETUNE_TEST_CACHE "FUSETUNE_CACHE_DIR=${FUSETUNE_TEST_CACHE_DIR}")

# Gives every test added so far in the calling directory that environment.
function(fusetune_test_caches)
  get_property(tests DIRECTORY PROPERTY TESTS)
  if(tests)
    set_property(TEST ${tests} APPEND PROPERTY ENVIRONMENT "${FUSETUNE_TEST_CACHE}")
  endif()
endfunction()
