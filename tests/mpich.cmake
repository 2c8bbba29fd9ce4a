# The MPICH configuration (the code must also build and pass against MPICH).
# Only the comm layer includes mpi.h (mpich_check.sh fails if another file does), so only it is compiled again,
# against MPICH (bs_comm_mpich); batchscale_mpich and test_collectives_mpich link it with the other layers' archives
# of this build: the objects a tree configured with -DBS_MPICH=ON compiles from the same sources and flags (such a
# tree, built inside the test, took 47 s of a 2-core machine's make test to compile them again, CUDA included).
pkg_check_modules(MPICH IMPORTED_TARGET mpich)
if(MPICH_FOUND)
  file(GLOB comm_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/comm/*.c)
  add_library(bs_comm_mpich STATIC ${comm_sources})
  # bs_comm's own include directories and definitions (src/, and CUDA's where the backend is built), not those
  # its dependencies bring (OpenMPI's headers)
  get_target_property(comm_includes bs_comm INCLUDE_DIRECTORIES)
  get_target_property(comm_definitions bs_comm COMPILE_DEFINITIONS)
  target_include_directories(bs_comm_mpich PRIVATE ${comm_includes})
  if(comm_definitions)
    target_compile_definitions(bs_comm_mpich PRIVATE ${comm_definitions})
  endif()
  # GCC reads MPI_STATUSES_IGNORE (MPICH: (MPI_Status *) 1) as a 0-byte array that MPI_Testall writes to
  target_compile_options(bs_comm_mpich PRIVATE -Wno-stringop-overflow)
  target_link_libraries(bs_comm_mpich PUBLIC bs_core bs_kernels bs_device PkgConfig::MPICH ${CMAKE_DL_LIBS})
  # The layers above comm name bs_comm (OpenMPI) among their dependencies: their archives are linked by file
  # instead, with the outside libraries they use; the layers below comm as targets.
  set(above_comm bs_cli bs_train bs_parallel bs_ckpt bs_model)
  add_executable(batchscale_mpich ${PROJECT_SOURCE_DIR}/src/cli/main.c)
  add_executable(test_collectives_mpich test_collectives.c)
  foreach(program batchscale_mpich test_collectives_mpich)
    target_include_directories(${program} PRIVATE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${program} PRIVATE -Wl,--start-group)
    foreach(layer ${above_comm})
      target_link_libraries(${program} PRIVATE $<TARGET_FILE:${layer}>)
    endforeach()
    target_link_libraries(${program} PRIVATE bs_comm_mpich bs_optim bs_data bs_plan bs_sweep bs_device bs_kernels
                          bs_core -Wl,--end-group PkgConfig::JANSSON PkgConfig::XXHASH PkgConfig::UTF8PROC
                          PkgConfig::CAIRO PkgConfig::FONTCONFIG OpenMP::OpenMP_C m)
    add_dependencies(${program} ${above_comm})
  endforeach()
  add_test(NAME comm_mpich_build_and_run COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpich_check.sh ${PROJECT_SOURCE_DIR}
           $<TARGET_FILE:batchscale_mpich> $<TARGET_FILE:test_collectives_mpich>)
else()
  add_test(NAME comm_mpich_build_and_run COMMAND sh -c "echo 'MPICH not found (pkg-config mpich): \
scripts/install-deps.sh installs libmpich-dev'; exit 1")
endif()
set_tests_properties(comm_mpich_build_and_run PROPERTIES TIMEOUT 600)

bs_tier(slow TESTS comm_mpich_build_and_run)
