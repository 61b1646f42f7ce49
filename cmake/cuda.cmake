# The CUDA backend (src/backend/cuda, every *.cu and *.cpp there) is the shared object libmopt_cuda.so, built next
# to mopt. mopt does not link it: backend/cuda_loader.cpp loads it on first use (docs/cuda.md, "The CUDA backend as
# a shared object"), so the binary needs no CUDA library. Without CUDA there is no mopt_cuda target and the loader
# answers "not built with CUDA".
#
# The object resolves mopt's own functions (Status, logging, validate_batch, ...) against the executable that
# loads it: mopt exports them (cmake/mopt_exports.list); an executable that links the object (the CUDA tests and
# benchmarks) gets them from its static libraries through mopt_cuda's INTERFACE link to mopt_backend, listed after
# the object. It links the CUDA runtime statically (its symbols stay hidden in the object), cuBLAS dynamically, and
# its own private copy of libstdc++ (hidden, like the binary's: the GPU machine has no Debian shared libraries).
# Executables that call the CUDA runtime themselves (the tests' buffers, the benchmarks' timers) link their own
# static copy: both copies work in the device's primary context, so memory, streams and events pass between them.
if(MOPT_HAVE_CUDA)
  file(GLOB_RECURSE cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu
                                                ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)
  add_library(mopt_cuda SHARED ${cuda_srcs})
  set_target_properties(mopt_cuda PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  target_include_directories(mopt_cuda PUBLIC ${CMAKE_SOURCE_DIR}/src ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(mopt_cuda PUBLIC MOPT_HAVE_CUDA=1)
  # sm_90a machine code for Hopper plus compute_80 PTX that the driver compiles for other recent GPUs.
  set(MOPT_CUDA_ARCHS "90a-real;80-virtual" CACHE STRING "CUDA architectures of the CUDA backend")
  set_target_properties(mopt_cuda PROPERTIES CUDA_ARCHITECTURES "${MOPT_CUDA_ARCHS}"
                        CUDA_SEPARABLE_COMPILATION OFF CUDA_STANDARD 17)
  target_compile_options(mopt_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
  target_link_libraries(mopt_cuda PRIVATE CUDA::cudart_static CUDA::cublasLt CUDA::cublas)
  target_link_options(mopt_cuda PRIVATE -static-libstdc++ -static-libgcc
                      "LINKER:--exclude-libs,libstdc++.a:libgcc.a:libgcc_eh.a")
  target_link_libraries(mopt_cuda INTERFACE mopt_backend CUDA::cudart_static)
endif()

# An executable that loads libmopt_cuda.so through backend/cuda_loader.cpp (mopt, and the GPU benchmarks that build
# their runner with make_runner) exports mopt's symbols to it, only those (cmake/mopt_exports.list): the object's
# references to typeinfo and functions the executable would otherwise keep hidden resolve against it.
function(mopt_export_to_cuda_backend target)
  if(MOPT_HAVE_CUDA)
    target_link_options(${target} PRIVATE "LINKER:--dynamic-list=${CMAKE_SOURCE_DIR}/cmake/mopt_exports.list")
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${CMAKE_SOURCE_DIR}/cmake/mopt_exports.list)
  endif()
endfunction()
