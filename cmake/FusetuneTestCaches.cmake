# Where the tests keep fusetune's caches (compiled host kernels, NVRTC's cubins, the default search
# database: core/files.h cache_dir): in the build tree, ${PROJECT_BINARY_DIR}/test-cache, not in
# the user's ~/.cache, which a test run must leave alone. One folder for all tests, so that the
# host builds of kernels.cu one test made serve the others (a folder a test would cost CI's
# two cores each model's host build again); a test that needs a cache of its own (the race's
# rehearsal) sets FUSETUNE_CACHE_DIR in its command, which wins.
set(FUSETUNE_TEST_CACHE "FUSETUNE_CACHE_DIR=${PROJECT_BINARY_DIR}/test-cache")

# Gives every test added so far in the calling directory that environment.
function(fusetune_test_caches)
  get_property(tests DIRECTORY PROPERTY TESTS)
  if(tests)
    set_property(TEST ${tests} APPEND PROPERTY ENVIRONMENT "${FUSETUNE_TEST_CACHE}")
  endif()
endfunction()
