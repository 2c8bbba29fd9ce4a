# bs_cuda.cmake: the CUDA backend of the device seam (src/device/cuda/).
# BS_CUDA=AUTO builds it where a CUDA compiler (nvcc) is found, ON requires
# one, OFF leaves it out. The kernels are compiled for sm_80 (A100) and
# sm_90a (H100/H200) with every warning an error, so they cannot rot on
# machines without a GPU. Defines BS_HAVE_CUDA and links bscuda into bs_device (the seam's layer).
set(BS_CUDA AUTO CACHE STRING "CUDA backend: AUTO (where nvcc is found), ON or OFF")
set_property(CACHE BS_CUDA PROPERTY STRINGS AUTO ON OFF)
set(BS_HAVE_CUDA OFF)
if(NOT BS_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(BS_HAVE_CUDA ON)
  elseif(BS_CUDA STREQUAL "ON")
    message(FATAL_ERROR "BS_CUDA=ON but no CUDA compiler (nvcc) was found: put it on the PATH or set CMAKE_CUDA_COMPILER")
  endif()
endif()
message(STATUS "CUDA backend: ${BS_HAVE_CUDA} (BS_CUDA=${BS_CUDA})")

if(BS_HAVE_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES 80 90a)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  add_library(bscuda STATIC src/device/cuda/device_cuda.cu src/device/cuda/cuda_kernels.cu
    src/device/cuda/flash_attention.cu src/device/cuda/classifier.cu src/device/cuda/fp8_kernels.cu
    src/device/cuda/fp8_linear.cu src/device/cuda/graph_cuda.cu src/device/cuda/moe_kernels.cu)
  target_include_directories(bscuda PRIVATE src)
  target_compile_definitions(bscuda PRIVATE BS_HAVE_CUDA)
  # The directory's C options (-march=native, -Wall ...) are not nvcc's: replace them.
  set_property(TARGET bscuda PROPERTY COMPILE_OPTIONS --Werror all-warnings -Xcompiler=-Wall,-Wextra,-Werror)
  # cudart statically and cuBLASLt by dlopen when a CUDA device opens (device/cuda/cublaslt_api.h):
  # linked as shared libraries they cost every process, CPU runs included, about 210 MB of resident memory.
  target_link_libraries(bscuda PUBLIC CUDA::cudart_static ${CMAKE_DL_LIBS} bs_core) # bs_core: bs_warn
  target_link_libraries(bs_device PUBLIC bscuda)
  set_property(TARGET bs_device bs_device_alone PROPERTY CUDA_ARCHITECTURES ${CMAKE_CUDA_ARCHITECTURES}) # made before CUDA was enabled
  target_compile_definitions(bs_device PRIVATE BS_HAVE_CUDA)
endif()
