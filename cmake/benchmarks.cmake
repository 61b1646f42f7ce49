# Benchmark programs: benchmarks/*.cpp -> one executable each (bench_<name>). They print figures; they are not tests.
file(GLOB bench_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/benchmarks/*.cpp)
foreach(src IN LISTS bench_srcs)
  get_filename_component(bname ${src} NAME_WE)
  add_executable(bench_${bname} ${src})
  target_link_libraries(bench_${bname} PRIVATE mopt_server mopt_loadgen)
endforeach()
