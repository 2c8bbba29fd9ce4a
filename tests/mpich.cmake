# The MPICH configuration (the code must also build and pass against MPICH).
add_test(NAME comm_mpich_build_and_run
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpich_check.sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/mpich)
set_tests_properties(comm_mpich_build_and_run PROPERTIES TIMEOUT 600)

bs_tier(slow TESTS comm_mpich_build_and_run)
