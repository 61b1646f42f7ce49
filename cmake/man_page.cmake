# Writes the mopt(1) man page from the binary's own help, so it cannot drift from the flags: `mopt --help` gives the
# verbs, each `mopt <verb> --help` its section. Run by the build (target mopt_man):
#   cmake -DMOPT=<path to mopt> -DVERSION=<x.y.z> -DOUT=<mopt.1> -P man_page.cmake
# and writes OUT and OUT.gz (gzip -9n, as Debian installs man pages).
if(NOT MOPT OR NOT VERSION OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DMOPT=<mopt> -DVERSION=<x.y.z> -DOUT=<mopt.1> -P man_page.cmake")
endif()

# Help text -> troff: backslashes escaped, lines that would read as requests protected, the build path dropped.
function(help_text out)
  execute_process(COMMAND ${MOPT} ${ARGN} --help OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${MOPT} ${ARGN} --help failed (${rc})")
  endif()
  string(REPLACE "${MOPT}" "mopt" text "${text}")
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

help_text(main)
string(REGEX MATCH "^[^\n]*" summary "${main}")
string(REGEX REPLACE "^mopt: " "" summary "${summary}")
string(REGEX MATCH "Subcommands:\n.*" verbs_block "${main}")
string(REGEX MATCHALL "\n  [a-z]+ " verb_lines "${verbs_block}")

set(page ".TH MOPT 1 \"\" \"mopt ${VERSION}\" \"User Commands\"\n.SH NAME\nmopt \\- ${summary}\n")
string(APPEND page ".SH SYNOPSIS\n.B mopt\n.I verb\n[\\fIoptions\\fR]\n.br\n.B mopt --help\n.br\n"
                   ".B mopt\n.I verb\n.B --help\n")
string(APPEND page ".SH DESCRIPTION\nOne binary does the work of a model-optimization engineer: it checks the machine, "
                   "reads a model, quantizes, generates, serves an OpenAI-compatible API with a web console, load-tests "
                   "servers, tunes serving settings and gates releases. Each verb is below, with its options as its "
                   "--help prints them.\n.PP\n.nf\n${main}.fi\n.SH VERBS\n")
foreach(line IN LISTS verb_lines)
  string(STRIP "${line}" verb)
  help_text(text ${verb})
  string(APPEND page ".SS \"mopt ${verb}\"\n.nf\n${text}.fi\n")
endforeach()
string(APPEND page ".SH FILES\n.TP\n.I /etc/mopt/serve.toml\n"
                   "Settings of the packaged service (mopt serve --config): keys are the long flag names.\n"
                   ".TP\n.I /usr/lib/systemd/system/mopt.service\nThe systemd unit that runs mopt serve with that file.\n"
                   ".TP\n.I /usr/lib/mopt/libmopt_cuda.so\nThe CUDA backend, loaded on first use (CUDA builds).\n"
                   ".SH ENVIRONMENT\n.TP\n.B MOPT_API_KEY\nThe API key of mopt serve (as --api-key).\n"
                   ".TP\n.B MOPT_CUDA_LIB\nPath of the CUDA backend, instead of the one next to the executable.\n"
                   ".SH SEE ALSO\n/usr/share/doc/mopt/ (serve.md, deploy.md)\n")
file(WRITE ${OUT} "${page}")
execute_process(COMMAND gzip -9n -c ${OUT} OUTPUT_FILE ${OUT}.gz RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${OUT} failed (${rc})")
endif()
