# Tests check_layers itself: on small trees written here, each with one include planted against the layer order, it
# must exit 1 and name the file, the line and the include with the rule it breaks; on a tree whose includes all
# follow the order it must exit 0.
# cmake -DCHECK=<check_layers binary> -DWORK=<scratch dir> -P planted_test.cmake
if(NOT CHECK OR NOT WORK)
  message(FATAL_ERROR "usage: cmake -DCHECK=<check_layers> -DWORK=<dir> -P planted_test.cmake")
endif()
file(REMOVE_RECURSE ${WORK})

# A tree with one file per module, each including only what it may.
function(write_good_tree dir)
  file(WRITE ${dir}/src/core/status.h "#pragma once\n")
  file(WRITE ${dir}/src/tokenizer/vocab.h "#pragma once\n#include \"core/status.h\"\n")
  file(WRITE ${dir}/src/model/model.h "#pragma once\n#include \"tokenizer/vocab.h\"\n#include \"model/config.h\"\n")
  file(WRITE ${dir}/src/model/config.h "#pragma once\n")
  file(WRITE ${dir}/src/backend/runner.h "#pragma once\n#include \"model/model.h\"\n")
  file(WRITE ${dir}/src/backend/runner.cpp
       "#include \"backend/cpu/cpu_runner.h\"\n#include \"backend/cuda/cuda_runner.h\"\n")
  file(WRITE ${dir}/src/backend/cpu/cpu_runner.h "#pragma once\n#include \"backend/runner.h\"\n#include \"vec.h\"\n")
  file(WRITE ${dir}/src/backend/cuda/cuda_runner.h "#pragma once\n  #  include \"backend/runner.h\"\n")
  file(WRITE ${dir}/src/engine/engine.h "#pragma once\n#include \"backend/runner.h\"\n#include <vector>\n")
  file(WRITE ${dir}/src/server/server.cpp "#include \"engine/engine.h\"\n#include \"tokenizer/vocab.h\"\n")
  file(WRITE ${dir}/src/loadgen/load.cpp "#include \"core/status.h\"\n")
  file(WRITE ${dir}/src/quant/quantize.cpp "#include \"engine/engine.h\"\n")
  file(WRITE ${dir}/src/eval/perplexity.cpp "#include \"engine/engine.h\"\n")
  file(WRITE ${dir}/src/gate/gate.cpp "#include \"server/server.h\"\n#include \"loadgen/load.h\"\n")
  file(WRITE ${dir}/src/doctor/doctor.cpp "#include \"backend/runner.h\"\n")
  # Modules of one rank may include each other in one direction.
  file(WRITE ${dir}/src/plan/plan.cpp "#include \"doctor/doctor.h\"\n#include \"engine/engine.h\"\n")
  file(WRITE ${dir}/src/tune/tune.cpp "#include \"plan/plan.h\"\n")
  file(WRITE ${dir}/src/cli/main.cpp "#include \"gate/gate.h\"\n#include \"loadgen/load.h\"\n")
  # Not C++: never read.
  file(WRITE ${dir}/src/tokenizer/notes.py "print('#include \"cli/main.h\"')\n")
endfunction()

function(run_check dir out_rc out_text)
  execute_process(COMMAND ${CHECK} ${dir}/src RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${out}${err}" PARENT_SCOPE)
endfunction()

set(good ${WORK}/good)
write_good_tree(${good})
run_check(${good} rc text)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_layers failed on a tree that follows the layer order (exit ${rc}):\n${text}")
endif()
if(NOT text MATCHES "check_layers: 23 includes in 18 files follow the layer order")
  message(FATAL_ERROR "check_layers did not report every include of the good tree:\n${text}")
endif()

# expect_bad(<case> <file below src/> <line 2 of that file> <expected message> [<offences>]): the good tree plus a
# file whose second line is the planted include must fail, reporting "src/<file><expected>" and <offences> offences in
# all (default 1).
set(n_cases 0)
function(expect_bad name file include_line expected)
  set(dir ${WORK}/${name})
  write_good_tree(${dir})
  file(WRITE ${dir}/src/${file} "// planted\n${include_line}\n")
  run_check(${dir} rc text)
  if(NOT rc EQUAL 1)
    message(FATAL_ERROR "${name}: check_layers exited ${rc} (expected 1) on a planted bad include:\n${text}")
  endif()
  string(FIND "${text}" "src/${file}${expected}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "${name}: expected \"src/${file}${expected}\" in the output of check_layers:\n${text}")
  endif()
  set(offences 1)
  if(ARGC GREATER 4)
    set(offences ${ARGV4})
  endif()
  if(NOT text MATCHES "check_layers: ${offences} include\\(s\\) against the layer order")
    message(FATAL_ERROR "${name}: expected ${offences} offence(s):\n${text}")
  endif()
  math(EXPR n "${n_cases} + 1")
  set(n_cases ${n} PARENT_SCOPE)
endfunction()

set(order "core <- tokenizer <- model <- backend <- engine <- {server, loadgen, quant, eval} <- {doctor, plan, tune, gate} <- cli")
expect_bad(model_up model/bad.cpp "#include \"engine/engine.h\""
           ":2: #include \"engine/engine.h\": model may not include engine, which is above it in the layer order (${order})")
expect_bad(tokenizer_model tokenizer/bpe.cpp "#include \"model/model.h\""
           ":2: #include \"model/model.h\": tokenizer may not include model, which is above it")
expect_bad(core_up core/log.h "#include \"tokenizer/vocab.h\""
           ":2: #include \"tokenizer/vocab.h\": core may not include tokenizer, which is above it")
expect_bad(cuda_cpu backend/cuda/runner.cpp "#include \"backend/cpu/kernels.h\""
           ":2: #include \"backend/cpu/kernels.h\": backend/cuda and backend/cpu are two implementations of backend/runner.h and may not include each other")
expect_bad(cpu_cuda backend/cpu/ops.cpp "  # include \"backend/cuda/kernels.h\""
           ":2: #include \"backend/cuda/kernels.h\": backend/cpu and backend/cuda are two implementations")
expect_bad(loadgen_engine loadgen/net.cpp "#include \"engine/engine.h\""
           ":2: #include \"engine/engine.h\": loadgen may include only core (and itself), not engine")
expect_bad(loadgen_tokenizer loadgen/workload.cpp "#include \"tokenizer/vocab.h\""
           ":2: #include \"tokenizer/vocab.h\": loadgen may include only core (and itself), not tokenizer")
# doctor -> plan closes doctor -> plan -> doctor (the good tree's plan includes doctor): both includes fail.
expect_bad(same_rank_cycle doctor/report.cpp "#include \"plan/plan.h\""
           ":2: #include \"plan/plan.h\": doctor and plan are modules of the same rank that include each other (a cycle)" 2)
# doctor -> tune closes doctor -> tune -> plan -> doctor: its three includes fail.
expect_bad(longer_cycle doctor/tuning.cpp "#include \"tune/tune.h\""
           ":2: #include \"tune/tune.h\": doctor and tune are modules of the same rank that include each other" 3)
expect_bad(plan_cli plan/plan.cpp "#include \"cli/commands.h\""
           ":2: #include \"cli/commands.h\": plan may not include cli, which is above it")
expect_bad(eval_tune eval/kl.cpp "#include \"tune/search.h\""
           ":2: #include \"tune/search.h\": eval may not include tune, which is above it")
expect_bad(unknown_module engine/x.cpp "#include \"bench/stats.h\""
           ":2: #include \"bench/stats.h\": \"bench\" is not a module of the layer order")
expect_bad(unknown_dir misc/x.cpp "#include \"core/status.h\""
           ": the file lies in no module of the layer order")
message(STATUS "check_layers: the good tree passes; ${n_cases} planted bad includes fail with their file, line and rule")
file(REMOVE_RECURSE ${WORK})
