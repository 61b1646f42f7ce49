# Installation and the Debian package (cpack -G DEB in the build folder; tests/deploy/deb_test.sh builds, installs
# and runs it). Layout:
#   /usr/lib/mopt/mopt (+ libmopt_cuda.so in CUDA builds: backend/cuda_loader.cpp loads it from next to the
#   executable, which /proc/self/exe names through the symlink), /usr/bin/mopt -> ../lib/mopt/mopt,
#   /usr/share/man/man1/mopt.1.gz (written from the binary's --help by cmake/man_page.cmake),
#   /usr/lib/systemd/system/mopt.service, /etc/mopt/serve.toml (a conffile), /usr/share/doc/mopt/.
install(TARGETS mopt RUNTIME DESTINATION lib/mopt)
if(TARGET mopt_cuda)
  install(TARGETS mopt_cuda LIBRARY DESTINATION lib/mopt)
endif()
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
file(CREATE_LINK ../lib/mopt/mopt ${CMAKE_BINARY_DIR}/package/mopt SYMBOLIC)
install(FILES ${CMAKE_BINARY_DIR}/package/mopt DESTINATION bin)

set(MOPT_MAN ${CMAKE_BINARY_DIR}/package/mopt.1)
add_custom_command(OUTPUT ${MOPT_MAN}.gz
  COMMAND ${CMAKE_COMMAND} -DMOPT=$<TARGET_FILE:mopt> -DVERSION=${PROJECT_VERSION} -DOUT=${MOPT_MAN}
          -P ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake
  DEPENDS mopt ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake
  COMMENT "mopt(1) from mopt --help" VERBATIM)
add_custom_target(mopt_man ALL DEPENDS ${MOPT_MAN}.gz)
install(FILES ${MOPT_MAN}.gz DESTINATION share/man/man1)

install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/mopt.service DESTINATION lib/systemd/system)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/serve.toml DESTINATION /etc/mopt)
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/serve.md ${CMAKE_SOURCE_DIR}/docs/deploy.md
        DESTINATION share/doc/mopt)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mopt)
set(CPACK_PACKAGE_VENDOR mopt)
set(CPACK_PACKAGE_CONTACT "mopt maintainers <maintainers@mopt.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM inference and optimization: OpenAI-compatible server, benchmarks, tuning")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "mopt turns a model file and a machine into a measured LLM service: mopt serve (OpenAI-compatible API, paged "
    "KV cache, continuous batching, Prometheus metrics, web console), bench, doctor, plan, run and more, in one "
    "binary. The CUDA backend is included when the package was built with CUDA; it needs the NVIDIA driver and the "
    "CUDA runtime's cuBLAS.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/mopt/mopt")
# Depends: dpkg-shlibdeps over the mopt binary, at cpack time (cmake/cpack_depends.cmake says why not over the CUDA
# backend). tests/deploy/deb_test.sh checks it against the binary's NEEDED entries and glibc symbol versions.
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/package/cpack_project.cmake CONTENT
     "set(MOPT_BINARY \"$<TARGET_FILE:mopt>\")\nset(MOPT_WORK \"${CMAKE_BINARY_DIR}/package/shlibdeps\")\n\
include(\"${CMAKE_SOURCE_DIR}/cmake/cpack_depends.cmake\")\n")
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_BINARY_DIR}/package/cpack_project.cmake)
# /etc/mopt/serve.toml is a conffile: an upgrade keeps the administrator's edits.
file(WRITE ${CMAKE_BINARY_DIR}/package/conffiles "/etc/mopt/serve.toml\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/package/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
