# Run by cpack (CPACK_PROJECT_CONFIG_FILE, written by cmake/package.cmake with MOPT_BINARY and MOPT_WORK set): the
# package's Depends is what dpkg-shlibdeps (dpkg-dev, part of build-essential) finds for the mopt binary, with the
# versions its symbols need: a CUDA build links libstdc++ statically and needs a newer glibc, for instance. The CUDA
# backend is left out: its cuBLAS comes from NVIDIA's CUDA runtime, which no Debian package provides, and mopt runs
# without it (CPU) where it is missing.
if(NOT CPACK_GENERATOR STREQUAL "DEB")
  return()
endif()
file(MAKE_DIRECTORY ${MOPT_WORK}/debian)
file(WRITE ${MOPT_WORK}/debian/control "Source: mopt\n\nPackage: mopt\nArchitecture: any\n")
execute_process(COMMAND dpkg-shlibdeps -O ${MOPT_BINARY} WORKING_DIRECTORY ${MOPT_WORK}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "shlibs:Depends=([^\n]+)")
  message(FATAL_ERROR "dpkg-shlibdeps ${MOPT_BINARY} failed (${rc}): ${err}\n(install dpkg-dev)")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${CMAKE_MATCH_1}")
