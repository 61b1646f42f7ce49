# The CUDA backend lives in src/backend/cuda. With CUDA: every *.cu and *.cpp there except *_stub.cpp.
# Without CUDA: only the *_stub.cpp files, which answer "not built with CUDA".
if(MOPT_HAVE_CUDA)
  file(GLOB_RECURSE cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu
                                                ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)
  list(FILTER cuda_srcs EXCLUDE REGEX "_stub\\.cpp$")
else()
  file(GLOB_RECURSE cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*_stub.cpp)
endif()
if(cuda_srcs)
  add_library(mopt_cuda STATIC ${cuda_srcs})
  target_include_directories(mopt_cuda PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(mopt_cuda PUBLIC mopt_backend)
  if(MOPT_HAVE_CUDA)
    # sm_90a machine code for Hopper plus compute_80 PTX that the driver compiles for other recent GPUs.
    set(MOPT_CUDA_ARCHS "90a-real;80-virtual" CACHE STRING "CUDA architectures of the CUDA backend")
    set_target_properties(mopt_cuda PROPERTIES CUDA_ARCHITECTURES "${MOPT_CUDA_ARCHS}"
                          CUDA_SEPARABLE_COMPILATION OFF CUDA_STANDARD 17)
    target_compile_options(mopt_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
    target_compile_definitions(mopt_cuda PUBLIC MOPT_HAVE_CUDA=1)
    target_link_libraries(mopt_cuda PUBLIC CUDA::cudart_static CUDA::cublasLt CUDA::cublas)
  endif()
else()
  add_library(mopt_cuda INTERFACE)
  target_link_libraries(mopt_cuda INTERFACE mopt_backend)
endif()
