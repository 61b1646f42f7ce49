# Unit tests: tests/unit/<module>/*_test.cpp -> one executable test_<module>, linked to mopt_<module>
# (or to mopt_server for modules listed in MOPT_TEST_FULL_LINK). GPU tests skip themselves without a GPU.
find_package(GTest REQUIRED)
include(GoogleTest)
file(GLOB test_dirs LIST_DIRECTORIES true ${CMAKE_SOURCE_DIR}/tests/unit/*)
foreach(dir IN LISTS test_dirs)
  if(NOT IS_DIRECTORY ${dir})
    continue()
  endif()
  get_filename_component(mod ${dir} NAME)
  file(GLOB_RECURSE tsrcs CONFIGURE_DEPENDS ${dir}/*.cpp)
  if(NOT tsrcs)
    continue()
  endif()
  add_executable(test_${mod} ${tsrcs})
  if(TARGET mopt_${mod})
    target_link_libraries(test_${mod} PRIVATE mopt_${mod})
  else()
    target_link_libraries(test_${mod} PRIVATE mopt_server mopt_bench)
  endif()
  target_link_libraries(test_${mod} PRIVATE GTest::gtest GTest::gtest_main)
  target_include_directories(test_${mod} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  gtest_discover_tests(test_${mod} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "MOPT_BIN=$<TARGET_FILE:mopt>")
endforeach()

# End-to-end and server tests are scripts (bash / node) run against the built binary.
file(GLOB e2e_scripts ${CMAKE_SOURCE_DIR}/tests/e2e/*_test.sh ${CMAKE_SOURCE_DIR}/tests/server/*_test.sh)
foreach(script IN LISTS e2e_scripts)
  get_filename_component(tname ${script} NAME_WE)
  add_test(NAME e2e.${tname} COMMAND bash ${script})
  set_tests_properties(e2e.${tname} PROPERTIES
    ENVIRONMENT "MOPT_BIN=$<TARGET_FILE:mopt>;MOPT_MODELS_DIR=${MOPT_MODELS_DIR};MOPT_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
    TIMEOUT 600)
endforeach()
