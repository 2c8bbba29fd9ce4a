# diloco.cmake: DiLoCo / FedAvg / FedProx (--local-steps) against PyTorch
# transcriptions and plain data parallelism (tests/test_diloco.py).
add_test(NAME diloco_reference COMMAND ${PY} ${CMAKE_CURRENT_SOURCE_DIR}/test_diloco.py)
set_tests_properties(diloco_reference PROPERTIES ENVIRONMENT "BATCHSCALE=${BS}" TIMEOUT 900)

bs_tier(peers TESTS diloco_reference)
