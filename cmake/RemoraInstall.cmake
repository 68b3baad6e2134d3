# What `cmake --install` puts beside the headers, libraries and tools:
#   share/man/man{1,3,7}     every page found at configure time in
#                            compat/dat/man, compat/rpma/man and docs/man
#   lib/cmake/Remora         find_package(Remora): Remora::remora,
#                            Remora::rpma, Remora::dat, with a version file
#   lib/pkgconfig            remora.pc (the C++ API), remora-rpma.pc (in place
#                            of librpma.pc), remora-dat.pc (DAT 1.2, -ldat)
include(CMakePackageConfigHelpers)

# Man pages, into the section their suffix names. The list is made when
# CMake configures; CONFIGURE_DEPENDS makes the next build re-configure when
# a page is added or removed (`cmake --install` alone does not).
set(_remora_man_dirs ${PROJECT_SOURCE_DIR}/compat/dat/man ${PROJECT_SOURCE_DIR}/compat/rpma/man
                     ${PROJECT_SOURCE_DIR}/docs/man)
foreach(_section 1 3 7)
  set(_pages "")
  foreach(_dir IN LISTS _remora_man_dirs)
    file(GLOB _found CONFIGURE_DEPENDS ${_dir}/*.${_section})
    list(APPEND _pages ${_found})
  endforeach()
  if(_pages)
    list(SORT _pages)
    install(FILES ${_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${_section})
  endif()
endforeach()

# CMake package.
set(REMORA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Remora)
# One file of targets per library, so that each can be packaged with its
# library (Debian: libremora-dev, libremora-rpma-dev, libremora-dat-dev);
# RemoraConfig.cmake loads those present, as components remora, rpma, dat.
install(EXPORT RemoraTargets NAMESPACE Remora:: FILE RemoraTargets.cmake DESTINATION ${REMORA_CMAKE_DIR})
install(EXPORT RemoraRpmaTargets NAMESPACE Remora:: FILE RemoraRpmaTargets.cmake DESTINATION ${REMORA_CMAKE_DIR})
install(EXPORT RemoraDatTargets NAMESPACE Remora:: FILE RemoraDatTargets.cmake DESTINATION ${REMORA_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/RemoraConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/RemoraConfig.cmake INSTALL_DESTINATION ${REMORA_CMAKE_DIR})
# 0.x: a minor release may change the API, so only 0.1.* satisfies 0.1.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/RemoraConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/RemoraConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/RemoraConfigVersion.cmake
        DESTINATION ${REMORA_CMAKE_DIR})

# pkg-config files. Paths are relative to ${prefix} where GNUInstallDirs gave
# relative ones. Outside the loader's default directories (/usr/local, a
# temporary prefix) ${prefix} is found from the file's own place, so that
# `cmake --install --prefix DIR` gives correct files, and they add a run path,
# so that one flag really is enough to build and run.
if(REMORA_INSTALL_LIBDIR_IS_SYSTEM OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(REMORA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _up "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
  string(REGEX REPLACE "/$" "" _up "${_up}")
  set(REMORA_PC_PREFIX "\${pcfiledir}/${_up}")
endif()
foreach(_kind libdir includedir)
  string(TOUPPER ${_kind} _KIND)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_KIND}}")
    set(REMORA_PC_${_KIND} "${CMAKE_INSTALL_${_KIND}}")
  else()
    set(REMORA_PC_${_KIND} "\${prefix}/${CMAKE_INSTALL_${_KIND}}")
  endif()
endforeach()
# With libremora.so.0 the program needs nothing else (the headers include no
# libfabric or libpmem2 header). libremora.a, the only library of a
# REMORA_SHARED=OFF build, needs both in every program's link: they are
# plain Requires (with Requires.private, `pkg-config --static` would be
# needed, and it asks for the static dependencies of libfabric itself).
if(REMORA_SHARED)
  set(REMORA_PC_REQUIRES "")
else()
  set(REMORA_PC_REQUIRES "Requires: libfabric libpmem2")
endif()
if(REMORA_INSTALL_LIBDIR_IS_SYSTEM)
  set(REMORA_PC_RPATH "")
else()
  set(REMORA_PC_RPATH "-Wl,-rpath,\${libdir} ")
endif()
foreach(_pc remora remora-rpma remora-dat)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/${_pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/${_pc}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${_pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

# scripts/install-check.sh: install into a temporary prefix, build the
# programs of tests/install/ out of tree with CMake and with pkg-config, run
# them against a server on 127.0.0.1.
if(BUILD_TESTING AND REMORA_SHARED AND NOT REMORA_SANITIZE)
  add_test(NAME install.check COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/install-check.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(install.check PROPERTIES TIMEOUT 600 LABELS install)
endif()
