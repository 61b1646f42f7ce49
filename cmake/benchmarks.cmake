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
  # The GPU benchmarks link the CUDA backend's shared object (first: its references resolve from the libraries after).
  if(bname MATCHES "^gpu_" AND TARGET mopt_cuda)
    target_link_libraries(bench_${bname} PRIVATE mopt_cuda)
    mopt_export_to_cuda_backend(bench_${bname})  # those that build their runner through the loader need it
  elseif(bname STREQUAL "eval_throughput" OR bname STREQUAL "structured_output" OR bname STREQUAL "speculative")
    mopt_export_to_cuda_backend(bench_${bname})  # --device cuda: the engine loads the backend at run time
  endif()
  target_link_libraries(bench_${bname} PRIVATE mopt_server mopt_loadgen mopt_eval mopt_quant)
  target_compile_definitions(bench_${bname} PRIVATE MOPT_MODELS_DIR="${MOPT_MODELS_DIR}")
endforeach()
