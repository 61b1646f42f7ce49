# Benchmark programs: benchmarks/*.cpp -> one executable each (bench_<name>). They print figures; they are not tests.
# Those that include the CUDA runtime's headers are built only with the CUDA backend.
file(GLOB bench_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/benchmarks/*.cpp)
foreach(src IN LISTS bench_srcs)
  get_filename_component(bname ${src} NAME_WE)
  file(STRINGS ${src} cuda_includes REGEX "^#include <cuda")
  if(cuda_includes AND NOT MOPT_HAVE_CUDA)
    continue()
  endif()
  add_executable(bench_${bname} ${src})
  target_link_libraries(bench_${bname} PRIVATE mopt_server mopt_loadgen)
endforeach()
