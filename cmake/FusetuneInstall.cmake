# What `cmake --install` puts where (GNU install directories under CMAKE_INSTALL_PREFIX):
#  - bin/fusetune: the command line (tune, coordinator, worker, submit, ...);
#  - lib/libfusetune_runtime.so and include/fusetune/runtime.h: the deployment runtime, and
#    lib/libfusetune_host.so beside it: the host backend's plugin (runtime/host_plugin.h);
#  - lib/cmake/fusetune: the package config, version file and exported target fusetune::runtime;
#  - share/fusetune: the systemd units and the Slurm batch script of docs/deploy.md.
include(CMakePackageConfigHelpers)

install(TARGETS fusetune RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS fusetune_runtime_api EXPORT fusetuneTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS fusetune_host_plugin LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_SKIP)
install(FILES ${PROJECT_SOURCE_DIR}/runtime/include/fusetune/runtime.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fusetune)
install(EXPORT fusetuneTargets NAMESPACE fusetune:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fusetune)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fusetuneConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/fusetuneConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fusetune)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fusetuneConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fusetuneConfig.cmake ${PROJECT_BINARY_DIR}/fusetuneConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fusetune)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/systemd/fusetune-coordinator.service
              ${PROJECT_SOURCE_DIR}/packaging/systemd/fusetune-worker.service
              ${PROJECT_SOURCE_DIR}/packaging/systemd/fusetune-worker@.service
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fusetune/systemd)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/packaging/slurm/fusetune-workers.sbatch
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fusetune/slurm)
