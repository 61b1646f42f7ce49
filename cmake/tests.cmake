# Unit tests mirror src/: every folder under tests/unit/ that holds *_test.cpp files directly becomes one executable,
# named after its path (tests/unit/backend/cpu -> test_backend_cpu) and linked to the module of its first path part
# plus the model loaders and the tokenizer (tests load models and decode their output), or to every module (mopt_cli)
# when there is no such module.
# GPU tests skip themselves without a GPU (visibly, with GTEST_SKIP and a reason).
find_package(GTest REQUIRED)
include(GoogleTest)
file(GLOB_RECURSE test_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/*_test.cpp)
set(test_dirs "")
foreach(f IN LISTS test_files)
  get_filename_component(d ${f} DIRECTORY)
  list(APPEND test_dirs ${d})
endforeach()
list(REMOVE_DUPLICATES test_dirs)
foreach(dir IN LISTS test_dirs)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR}/tests/unit ${dir})
  string(REPLACE "/" "_" tname ${rel})
  file(GLOB tsrcs CONFIGURE_DEPENDS ${dir}/*.cpp)
  add_executable(test_${tname} ${tsrcs})
  string(REGEX REPLACE "/.*" "" mod ${rel})
  # The CUDA tests link the CUDA backend's shared object (first: its references resolve from the libraries after).
  set(cuda_so "")
  if((rel STREQUAL "backend/cuda" OR rel STREQUAL "backend/cuda_tp") AND TARGET mopt_cuda)
    set(cuda_so mopt_cuda)
  endif()
  # The others that run an engine on CUDA (engine/speculative's draft test) load the object at run time, as mopt
  # does, and export mopt's symbols to it.
  if(NOT cuda_so)
    mopt_export_to_cuda_backend(test_${tname})
  endif()
  if(TARGET mopt_${mod})
    target_link_libraries(test_${tname} PRIVATE ${cuda_so} mopt_${mod} mopt_model)
  else()
    target_link_libraries(test_${tname} PRIVATE ${cuda_so} mopt_cli)
  endif()
  target_link_libraries(test_${tname} PRIVATE GTest::gtest GTest::gtest_main)
  if(MOPT_UNITY_TESTS)
    set_target_properties(test_${tname} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
  target_include_directories(test_${tname} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  # Paths of this checkout only here, in the tests: the libraries compile to the same objects in any checkout
  # (ccache hits across worktrees).
  target_compile_definitions(test_${tname} PRIVATE MOPT_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                             MOPT_MODELS_DIR="${MOPT_MODELS_DIR}")
  gtest_discover_tests(test_${tname} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "MOPT_BIN=$<TARGET_FILE:mopt>")
endforeach()

# End-to-end and server tests are scripts (bash / node) run against the built binary. A script that cannot run here
# says why and exits 77, which ctest reports as a skip (a skip that exits 0 would count as a pass).
file(GLOB e2e_scripts ${CMAKE_SOURCE_DIR}/tests/e2e/*_test.sh ${CMAKE_SOURCE_DIR}/tests/server/*_test.sh
     ${CMAKE_SOURCE_DIR}/tests/deploy/*_test.sh)
foreach(script IN LISTS e2e_scripts)
  get_filename_component(tname ${script} NAME_WE)
  add_test(NAME e2e.${tname} COMMAND bash ${script})
  set_tests_properties(e2e.${tname} PROPERTIES
    ENVIRONMENT "MOPT_BIN=$<TARGET_FILE:mopt>;MOPT_MODELS_DIR=${MOPT_MODELS_DIR};MOPT_SOURCE_DIR=${CMAKE_SOURCE_DIR};MOPT_CUDA_BUILT=${MOPT_HAVE_CUDA};MOPT_BUILD_DIR=${CMAKE_BINARY_DIR}"
    TIMEOUT 600 SKIP_RETURN_CODE 77)
endforeach()

# The layer order of DESIGN.md, checked on every #include "..." under src/ (tests/layering/check_layers.cpp), and
# the check itself, on small trees with planted includes against the order.
add_executable(check_layers ${CMAKE_SOURCE_DIR}/tests/layering/check_layers.cpp)
add_test(NAME layering.tree COMMAND check_layers ${CMAKE_SOURCE_DIR}/src)
add_test(NAME layering.planted COMMAND ${CMAKE_COMMAND} -DCHECK=$<TARGET_FILE:check_layers>
         -DWORK=${CMAKE_BINARY_DIR}/layering_planted -P ${CMAKE_SOURCE_DIR}/tests/layering/planted_test.cmake)

# The doctor tests drive NVML and the CUDA driver through fakes that simulate machines (tests/unit/doctor/fake).
if(TARGET test_doctor)
  foreach(fake nvml cuda)
    add_library(mopt_fake_${fake} SHARED ${CMAKE_SOURCE_DIR}/tests/unit/doctor/fake/fake_${fake}.c)
    set_target_properties(mopt_fake_${fake} PROPERTIES NO_SONAME ON C_VISIBILITY_PRESET default)
    add_dependencies(test_doctor mopt_fake_${fake})
  endforeach()
  target_compile_definitions(test_doctor PRIVATE MOPT_FAKE_NVML="$<TARGET_FILE:mopt_fake_nvml>"
                             MOPT_FAKE_CUDA="$<TARGET_FILE:mopt_fake_cuda>")
endif()
