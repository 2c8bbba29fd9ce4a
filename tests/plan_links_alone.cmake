# plan_links_alone.cmake: fails if the planner's programs (linked with bs_plan
# alone) reach a library of the engine's: MPI, oneDNN, BLAS, cairo. Checks
# LINKS, everything CMake links them with (plan.cmake collects it through
# target_link_libraries), and what each of PROGRAMS loads (its ELF DT_NEEDED,
# read by CMake's own reader: a library the linker kept because it is used).
#   cmake -DLINKS=a,b -DPROGRAMS=x,y -P plan_links_alone.cmake
set(FORBIDDEN "(mpi|MPI|dnnl|openblas|blas|cairo|CAIRO|fontconfig|FONTCONFIG)")
string(REPLACE "," ";" LINKS "${LINKS}")
string(REPLACE "," ";" PROGRAMS "${PROGRAMS}")
foreach(link ${LINKS})
  if(link MATCHES "${FORBIDDEN}")
    message(FATAL_ERROR "the planner's programs link ${link}: src/plan must link without MPI, oneDNN, BLAS and cairo")
  endif()
endforeach()
foreach(program ${PROGRAMS})
  file(GET_RUNTIME_DEPENDENCIES EXECUTABLES ${program} RESOLVED_DEPENDENCIES_VAR found
       UNRESOLVED_DEPENDENCIES_VAR missing)
  foreach(lib ${found} ${missing})
    get_filename_component(name ${lib} NAME)
    if(name MATCHES "^lib${FORBIDDEN}")
      message(FATAL_ERROR "${program} loads ${name}: src/plan must link without MPI, oneDNN, BLAS and cairo")
    endif()
  endforeach()
endforeach()
