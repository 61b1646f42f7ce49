# libFuzzer targets: fuzz/*_fuzz.cpp (build with clang: CC=clang CXX=clang++ -DMOPT_FUZZ=ON).
# The request-path targets (fuzz/request_fuzz_bodies.h) need the server module and read a seed template from the
# source tree (MOPT_SOURCE_DIR); the loader targets need only the model module.
file(GLOB fuzz_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/*_fuzz.cpp)
foreach(src IN LISTS fuzz_srcs)
  get_filename_component(fname ${src} NAME_WE)
  add_executable(${fname} ${src})
  target_compile_options(${fname} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(${fname} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${fname} PRIVATE mopt_server)
  target_compile_definitions(${fname} PRIVATE MOPT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endforeach()
